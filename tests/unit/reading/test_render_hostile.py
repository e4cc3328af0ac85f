"""``rollgym traces ls/show`` print ids written by anyone who could post OTLP: never as markup
or terminal escapes. The ids travel the real path: SDK exporter -> store process -> SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.cli import traces as traces_cli
from rollgym.telemetry import names
from synthetic_run import planting_spans

HOSTILE = [
    "a[/]b",  # a closing tag with nothing open: rich raises MarkupError
    "[link=https://evil.example]click[/link]",  # a hyperlink hidden in an id
    "x\x1b[31mred\x1b[0m",  # ANSI colour
    "y\x1b]8;;https://evil.example\x07z",  # OSC 8 hyperlink
    "bold[bold]tail\\",  # markup plus a trailing backslash
]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("hostile")
    with planting_spans(run_dir, "test") as tracer:
        for rollout_id in HOSTILE:
            with (
                tracer.start_as_current_span(
                    names.SPAN_DISPATCH,
                    attributes={
                        names.ROLLOUT_ID: rollout_id,
                        names.ROLLOUT_ATTEMPT: 0,
                        names.DISPATCH_NAME: "[red]agent\x1b[2J",
                    },
                ),
                tracer.start_as_current_span("[/]child\x1b[1m"),
            ):
                pass
    return run_dir


def _assert_inert(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b" in text  # the escape is shown, not swallowed


def test_ls_prints_hostile_ids_as_text(hostile_run: Path, capsys) -> None:
    assert traces_cli.main(["ls", str(hostile_run), "--sort", "rollout_id"]) == 0
    out = capsys.readouterr().out
    _assert_inert(out)
    assert "a[/]b" in out and "[link=https://evil.example]click[/link]" in out
    assert "[red]agent\\x1b[2J" in out


@pytest.mark.parametrize("rollout_id", HOSTILE)
def test_show_prints_hostile_ids_and_span_names_as_text(
    hostile_run: Path, capsys, rollout_id: str
) -> None:
    assert traces_cli.main(["show", str(hostile_run), rollout_id]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "[/]child\\x1b[1m" in out
    shown = rollout_id.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    assert shown in out


def test_show_of_an_unknown_hostile_id_is_text(hostile_run: Path, capsys) -> None:
    assert traces_cli.main(["show", str(hostile_run), "[/]nope\x1b[5m"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "[/]nope\\x1b[5m" in out
