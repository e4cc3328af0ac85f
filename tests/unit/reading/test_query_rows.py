"""The TypedDicts of query_rows.py name exactly the keys the queries answer with.

mypy checks every reader of a row against these shapes; this test checks the shapes against
the rows a real store answers, so a query that gains or loses a key cannot leave its type
behind.
"""

from __future__ import annotations

from pathlib import Path

from rollgym.reading import queries
from rollgym.reading.failures import FailedAttempt, failed_attempts
from rollgym.reading.query_rows import (
    AttemptDetail,
    DispatchRow,
    LinkRow,
    RolloutDetail,
    RolloutsPage,
    SlowDispatch,
    SpanRow,
)
from rollgym.tracestore.store import connect_readonly
from synthetic_run import SyntheticRun


def _keys(shape: type) -> set[str]:
    return set(shape.__annotations__) | {
        key for base in shape.__mro__ for key in getattr(base, "__annotations__", {})
    }


def test_every_query_row_has_exactly_its_typed_keys(
    finished_run: tuple[Path, SyntheticRun],
) -> None:
    run_dir, _ = finished_run
    with connect_readonly(run_dir / "traces.db") as conn:
        page = queries.list_rollouts(conn, limit=5)
        detail = queries.rollout_detail(conn, "4-0-a1")
        slow = queries.slowest(conn, 2)
        failed, total = failed_attempts(conn)
    assert set(page) == _keys(RolloutsPage)
    assert page["rows"] and all(set(row) == _keys(DispatchRow) for row in page["rows"])
    assert set(detail) == _keys(RolloutDetail)
    attempt = detail["attempts"][0]
    assert set(attempt) == _keys(AttemptDetail) == _keys(DispatchRow) | {"spans"}
    assert all(set(span) == _keys(SpanRow) for span in attempt["spans"])
    links = [link for span in attempt["spans"] for link in span["links"]]
    assert links and all(set(link) == _keys(LinkRow) for link in links)
    assert slow and all(set(item) == _keys(SlowDispatch) for item in slow)
    assert total >= len(failed) > 0
    assert all(set(row) == _keys(FailedAttempt) for row in failed)


def test_row_values_have_the_types_the_shapes_name(
    finished_run: tuple[Path, SyntheticRun],
) -> None:
    run_dir, _ = finished_run
    with connect_readonly(run_dir / "traces.db") as conn:
        detail = queries.rollout_detail(conn, "4-0")
    for attempt in detail["attempts"]:
        assert isinstance(attempt["trace_id"], str) and len(attempt["trace_id"]) == 32
        assert isinstance(attempt["is_root"], bool)
        for span in attempt["spans"]:
            assert isinstance(span["span_id"], str) and len(span["span_id"]) == 16
            assert isinstance(span["attributes"], dict) and isinstance(span["events"], list)
            assert isinstance(span["resource"], dict)
            assert isinstance(span["start_ns"], int) and isinstance(span["duration_ms"], float)
