"""A failed attempt's kind and message from its spans, and the panel's grouping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollgym.reading.failures import attempt_error, failed_attempts, groups, last_attempt
from rollgym.reading.queries import base_rollout_id, rollout_attempts, trace_spans
from rollgym.tracestore.store import connect_readonly
from synthetic_run import SyntheticRun


def _span(name: str, start: int, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "start_ns": start,
        "kind": 1,
        "status_code": 0,
        "status_message": None,
        "attributes": {},
        "events": [],
        **fields,
    }


def test_an_agent_answering_500_is_http_5xx_with_the_agents_message() -> None:
    spans = [
        _span("gym.rollout.dispatch", 0, status_code=2, status_message="error"),
        _span(
            "POST /run",
            1,
            kind=3,
            status_code=2,
            attributes={"http.response.status_code": 500, "error.type": "500"},
        ),
        _span("gym.rollout", 2, status_code=2, status_message="HTTPError: agent 'x' failed: boom"),
    ]
    assert attempt_error({"outcome": "error"}, spans) == {
        "error_kind": "http_5xx",
        "message": "HTTPError: agent 'x' failed: boom",
    }


def test_429_4xx_timeout_and_the_exception_event() -> None:
    def client(status: int) -> list[dict[str, Any]]:
        return [_span("POST /run", 0, kind=3, attributes={"http.response.status_code": status})]

    assert attempt_error({"outcome": "error"}, client(429))["error_kind"] == "http_429"
    assert attempt_error({"outcome": "error"}, client(404))["error_kind"] == "http_4xx"
    assert attempt_error({"outcome": "timeout"}, client(200))["error_kind"] == "timeout"
    raised = [
        _span(
            "gym.rollout",
            0,
            status_code=2,
            attributes={"error.type": "ValueError"},
            events=[{"name": "exception", "attributes": {"exception.message": "bad"}}],
        )
    ]
    assert attempt_error({"outcome": "error"}, raised) == {
        "error_kind": "ValueError",
        "message": "bad",
    }
    assert attempt_error({"outcome": "error"}, []) == {"error_kind": "error", "message": None}


def test_groups_count_kinds_and_messages_most_frequent_first() -> None:
    rows = [
        {"rollout_id": "1-0", "error_kind": "http_5xx", "message": "a"},
        {"rollout_id": "2-0", "error_kind": "http_5xx", "message": "b"},
        {"rollout_id": "3-0", "error_kind": "http_5xx", "message": "b"},
        {"rollout_id": "4-0", "error_kind": "timeout", "message": None},
    ]
    found = groups(rows)
    assert [(g["error_kind"], g["count"]) for g in found] == [("http_5xx", 3), ("timeout", 1)]
    assert found[0]["messages"] == [{"message": "b", "count": 2}, {"message": "a", "count": 1}]
    assert found[0]["rollout_ids"] == ["1-0", "2-0", "3-0"]
    assert found[1]["messages"] == [{"message": "(no message recorded)", "count": 1}]


def test_the_lean_reads_agree_with_the_whole_trace_and_attempt_rows(
    finished_run: tuple[Path, SyntheticRun],
) -> None:
    """``error_spans`` / ``last_attempt`` (what the panel reads now) give the same kinds,
    messages and final attempts as whole traces and whole attempt rows."""
    run_dir, run = finished_run
    conn = connect_readonly(run_dir / "traces.db")
    try:
        rows, total = failed_attempts(conn)
        assert total == len(rows) > 0
        finals = 0
        for row in rows:
            whole = attempt_error(row, trace_spans(conn, row["trace_id"]))
            assert {k: row[k] for k in whole} == whole
            attempts = rollout_attempts(conn, row["rollout_id"])
            newest = max(attempts, key=lambda a: a["attempt"] or 0)["rollout_id"]
            assert last_attempt(conn, base_rollout_id(row["rollout_id"])) == newest
            assert row["final"] == (newest == row["rollout_id"])
            finals += row["final"]
        # every 7th rollout fails for good; every 5th failed once, then was answered
        assert finals == len(run.failures) and len(rows) > finals
        assert last_attempt(conn, "no-such-rollout") is None
    finally:
        conn.close()
