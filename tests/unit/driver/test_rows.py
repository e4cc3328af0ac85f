"""The rows reader: streaming, task indices, and every bad input named by file:line:field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.driver.rows import (
    BadLine,
    Rollout,
    Router,
    TaskRow,
    collector_row,
    expand,
    read_jsonl,
    unstamped,
)

ROUTER = Router(
    agents={"solver", "other"}, environment_routes={"arith": "env"}, default_agent="solver"
)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_blank_lines_do_not_count_as_tasks_but_lines_are_physical(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"q": 1}', "", "   ", '{"q": 2}'])
    entries = list(read_jsonl(path, ROUTER))
    assert [(e.task_index, e.line) for e in entries] == [(0, 1), (1, 4)]


def test_a_byte_order_mark_before_the_first_row_is_skipped_not_refused(tmp_path: Path) -> None:
    """A file saved "UTF-8 with BOM" (Windows editors, spreadsheet exports) and CRLF line
    ends reads as the same rows as without them; a mark anywhere else is still refused."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"q": 1}\r\n\xef\xbb\xbf{"q": 2}\r\n{"q": 3}\r\n')
    first, second, third = list(read_jsonl(path, ROUTER))
    assert isinstance(first, TaskRow) and first.row["q"] == 1
    assert isinstance(second, BadLine) and "rows.jsonl:2" in second.message
    assert isinstance(third, TaskRow) and (third.task_index, third.line) == (2, 3)


@pytest.mark.parametrize(
    ("line", "field", "expected"),
    [
        ('{"q": 1', None, "malformed JSON"),
        ("[1, 2]", None, "expected a JSON object, got list"),
        ('"text"', None, "expected a JSON object, got str"),
        ('{"rollout_id": 5}', "rollout_id", "expected a non-empty string, got int 5"),
        ('{"rollout_id": ""}', "rollout_id", "expected a non-empty string"),
        ('{"task_index": "3"}', "task_index", "expected a non-negative integer"),
        ('{"rollout_index": 1.5}', "rollout_index", "expected a non-negative integer"),
        ('{"attempt": [1]}', "attempt", "got list [1]"),
        ('{"attempt": true}', "attempt", "got bool True"),
        ('{"agent": 3}', "agent", "expected a string"),
        ('{"task_id": {"taskset": 1, "task_id": "a"}}', "task_id", "expected {'taskset'"),
        ('{"task_id": [1]}', "task_id", "expected {'taskset'"),
        ('{"rollout_id": "a\\nrollgym: all good"}', "rollout_id", "character U+000A at position 1"),
        ('{"rollout_id": "x\\u001b[2J"}', "rollout_id", "character U+001B at position 1"),
        ('{"rollout_id": "nul\\u0000"}', "rollout_id", "character U+0000 at position 3"),
        ('{"rollout_id": "c1\\u009b"}', "rollout_id", "character U+009B"),
        ('{"rollout_id": "\\u202egnp.exe"}', "rollout_id", "character U+202E at position 0"),
    ],
)
def test_each_bad_line_names_file_line_and_field(
    tmp_path: Path, line: str, field: str | None, expected: str
) -> None:
    path = _write(tmp_path, ['{"q": 0}', line])
    good, bad = list(read_jsonl(path, ROUTER))
    assert isinstance(good, TaskRow)
    assert isinstance(bad, BadLine)
    assert bad.message.startswith(f"{path}:2: ")
    if field:
        assert f"field {field!r}" in bad.message
    assert expected in bad.message
    (failure,) = list(expand(bad, repeats=3))
    assert failure.error_kind == "invalid_row" and failure.line == 2 and failure.task_index == 1


def test_valid_stamps_in_the_input_are_overwritten(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"q": 1, "task_index": 9, "attempt": 4}'])
    (entry,) = list(read_jsonl(path, ROUTER))
    row = collector_row(Rollout(entry, 1), attempt=2)
    assert (row["task_index"], row["rollout_index"], row["attempt"]) == (0, 1, 2)
    assert unstamped(row) == {"q": 1}


def test_routing_by_agent_default_and_taskset(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            '{"q": 1}',
            '{"agent": "other"}',
            '{"task_id": {"taskset": "arith", "task_id": 3}}',
            '{"task_id": {"taskset": "arith", "task_id": 3}, "agent": "other"}',
        ],
    )
    targets = [(e.target.dispatch_name, e.target.episode) for e in read_jsonl(path, ROUTER)]
    assert targets == [("solver", False), ("other", False), ("env", True), ("env", True)]


def test_unknown_agent_and_unknown_route_become_one_failure_per_rollout(tmp_path: Path) -> None:
    router = Router(agents={"solver"}, environment_routes={}, default_agent=None)
    path = _write(
        tmp_path,
        ['{"agent": "ghost"}', '{"task_id": {"taskset": "nope", "task_id": 1}}', '{"q": 1}'],
    )
    entries = list(read_jsonl(path, router))
    failures = [f for entry in entries for f in expand(entry, repeats=2)]
    kinds = [(f.error_kind, f.rollout_id, f.line) for f in failures]
    assert kinds == [
        ("unknown_agent", "0-0", 1),
        ("unknown_agent", "0-1", 1),
        ("unknown_route", "1-0", 2),
        ("unknown_route", "1-1", 2),
        ("unknown_route", "2-0", 3),
        ("unknown_route", "2-1", 3),
    ]
    assert f"{path}:1: field 'agent': unknown agent 'ghost'" in failures[0].message
    assert "field 'task_id': task set 'nope'" in failures[2].message


def test_reader_streams_without_reading_ahead(tmp_path: Path) -> None:
    path = _write(tmp_path, ['{"q": 1}', "{broken"])
    entries = read_jsonl(path, ROUTER)
    first = next(entries)
    assert isinstance(first, TaskRow)
    # The file is open and positioned, not loaded: appending now is still seen.
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"q": 3}\n')
    rest = list(entries)
    assert [type(e).__name__ for e in rest] == ["BadLine", "TaskRow"]


def test_skip_drops_finished_rollouts() -> None:
    entry = TaskRow(4, 5, {}, None, ROUTER.route({}, "x"))  # type: ignore[arg-type]
    items = list(expand(entry, 3, skip=lambda t, r: r == 1))
    assert [i.rollout_index for i in items] == [0, 2]
