"""The one escaping of text from input or model output before it is printed."""

from __future__ import annotations

import pytest

from rollgym.printable import first_unprintable, printable, printable_lines


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("3-0", "3-0"),
        ("tâche-1 задача 🚀", "tâche-1 задача 🚀"),
        ("a\nb", "a\\nb"),
        ("\x1b[2J", "\\x1b[2J"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("nul\x00del\x7fc1\x9b", "nul\\x00del\\x7fc1\\x9b"),
        ("tab\tcr\r", "tab\\tcr\\r"),
        ("\u202eevil\u2066", "\\u202eevil\\u2066"),
        ("line\u2028sep", "line\\u2028sep"),
        ("lone\ud800", "lone\\ud800"),
    ],
)
def test_what_a_terminal_acts_on_is_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(raw).isprintable()


def test_lines_stay_lines_and_their_contents_are_escaped() -> None:
    assert printable_lines("one\x1b[2J\ntwo") == "one\\x1b[2J\ntwo"


def test_first_unprintable_is_the_position_or_none() -> None:
    assert first_unprintable("abc") is None
    assert first_unprintable("ab\x1bc") == 2
    assert first_unprintable("👨‍👩‍👧") is None  # a joiner is not a control
    assert printable(42) == "42"
