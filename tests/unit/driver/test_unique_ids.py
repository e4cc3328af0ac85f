"""Explicit rollout ids must name one rollout each: a colliding row becomes one invalid_row."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rollgym.driver.rows import BadLine, Router, TaskRow, expand, read_jsonl
from rollgym.driver.unique_ids import UniqueIds

ROUTER = Router(agents={"solver"}, environment_routes={}, default_agent="solver")


def _read(tmp_path: Path, rows: list[dict[str, object]], repeats: int = 2, attempts: int = 3):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(orjson.dumps(r).decode() for r in rows) + "\n", encoding="utf-8")
    return path, list(read_jsonl(path, ROUTER, UniqueIds(repeats, attempts)))


@pytest.mark.parametrize(
    ("rows", "bad_line", "says"),
    [
        # the same explicit id twice
        ([{"rollout_id": "dup"}, {"rollout_id": "dup"}], 2, "'dup' on line 1"),
        # explicit dup-r1 is repeat 1 of dup (repeats=2)
        ([{"rollout_id": "dup"}, {"rollout_id": "dup-r1"}], 2, "repeat 1 of 'dup' on line 1"),
        # ... and the other way round: dup's repeat 1 is the earlier explicit dup-r1
        ([{"rollout_id": "dup-r1"}, {"rollout_id": "dup"}], 2, "'dup-r1' on line 1"),
        # explicit dup-a1 is the first retry of dup
        ([{"rollout_id": "dup"}, {"rollout_id": "dup-a2"}], 2, "attempt 2, of 'dup' on line 1"),
        # explicit 0-1 is repeat 1 of the automatic row 0
        ([{"q": 1}, {"rollout_id": "0-1"}], 2, "task 0 (its automatic id)"),
        # explicit 1-0 first, then row 1 would run under the automatic id 1-0
        ([{"rollout_id": "1-0"}, {"q": 2}], 2, "explicit rollout_id of line 1"),
    ],
)
def test_a_colliding_row_is_one_invalid_row_naming_both_lines(
    tmp_path: Path, rows: list[dict[str, object]], bad_line: int, says: str
) -> None:
    path, entries = _read(tmp_path, rows)
    assert isinstance(entries[0], TaskRow)
    bad = entries[1]
    assert isinstance(bad, BadLine) and bad.line == bad_line
    assert bad.message.startswith(f"{path}:{bad_line}: field 'rollout_id': ")
    assert says in bad.message and "must be unique" in bad.message
    failures = list(expand(bad, 2))
    assert [(f.error_kind, f.rollout_id) for f in failures] == [("invalid_row", None)]


def test_ids_that_only_look_alike_are_accepted(tmp_path: Path) -> None:
    rows = [
        {"rollout_id": "dup"},
        {"rollout_id": "dup-r2"},  # repeat 2 does not exist with repeats=2
        {"rollout_id": "dup-a3"},  # attempt 3 does not exist with max_attempts=3
        {"rollout_id": "5-0"},  # no task 5 in this input
        {"q": 1},
        {"rollout_id": "model-run"},
    ]
    _, entries = _read(tmp_path, rows)
    assert all(isinstance(e, TaskRow) for e in entries)


def test_every_rollout_id_of_an_accepted_input_is_distinct(tmp_path: Path) -> None:
    from rollgym.identity import make_rollout_id

    rows: list[dict[str, object]] = [
        {"rollout_id": "a"},
        {"rollout_id": "a-r1"},
        {"q": 1},
        {"rollout_id": "2-0"},
        {"rollout_id": "a-r1-a1"},
        {"rollout_id": "b-a1"},
        {"rollout_id": "b"},
    ]
    _, entries = _read(tmp_path, rows)
    ids: list[str] = []
    for entry in entries:
        if isinstance(entry, TaskRow):
            ids += [
                make_rollout_id(entry.explicit_id, entry.task_index, r, a)
                for r in range(2)
                for a in range(3)
            ]
    assert len(ids) == len(set(ids))
    assert [type(e).__name__ for e in entries] == [
        "TaskRow",
        "BadLine",
        "TaskRow",
        "BadLine",
        "BadLine",
        "TaskRow",
        "BadLine",
    ]
