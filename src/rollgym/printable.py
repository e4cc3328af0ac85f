"""Text from input or model output made safe to print: the one escaping of what a terminal
would act on.

A rollout id, a row's field, an error message that quotes a model's answer or a server's
text: rollgym prints them on one line of a terminal (the first-failure line, the progress and
summary lines, the end-of-run table, ``traces ls/show/profile``, ``compare``, every one-line
error). Printed raw, an ESC sequence in them could clear the screen or set the window title,
a newline could forge a line of rollgym's own ("rollgym: all good, 0 failed"), a bidirectional
override could reorder what is shown. :func:`printable` writes each such character as a
Python-style escape (``\\x1b``, ``\\n``, ``\\u202e``), so the line stays one line and shows
exactly what was received. The same set of characters is what no rollout id may hold
(:func:`rollgym.identity.id_problem`): :func:`first_unprintable` finds the first.
"""

from __future__ import annotations

import re
from typing import Final

#: What a terminal acts on or a header cannot carry: C0 controls (newline and tab included),
#: DEL and C1 controls, lone surrogates, line and paragraph separators, and the bidirectional
#: marks, embeddings, overrides and isolates (they reorder what is shown around them).
_UNPRINTABLE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


#: The escapes Python's repr writes for the common ones, kept as readable.
_NAMED: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (``str()`` of it) with every character :data:`_UNPRINTABLE` names escaped."""
    value = text if isinstance(text, str) else str(text)
    if value.isascii() and value.isprintable():
        return value  # the common case: one C-level scan, nothing to escape
    return _UNPRINTABLE.sub(_escape, value)


def printable_lines(text: str) -> str:
    """A multi-line text (a rendered table, a report) with each of its lines kept and
    everything else :func:`printable` escapes escaped inside them."""
    return "\n".join(printable(line) for line in text.split("\n"))


def first_unprintable(text: str) -> int | None:
    """The position of the first character :func:`printable` would escape, or None."""
    if text.isascii() and text.isprintable():
        return None
    match = _UNPRINTABLE.search(text)
    return match.start() if match else None
