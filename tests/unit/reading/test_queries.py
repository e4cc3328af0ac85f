"""Queries and the CLI over a real store holding a synthetic run (exported by the OTel SDK)."""

from __future__ import annotations

import inspect
from pathlib import Path

import orjson
import pytest

from rollgym.cli import traces as traces_cli
from rollgym.reading import queries
from rollgym.telemetry import names
from rollgym.tracestore.store import connect_readonly
from synthetic_run import SyntheticRun


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert traces_cli.main([*argv, "--json"]) == 0
    return orjson.loads(capsys.readouterr().out)


def test_ls_pages_filters_and_sorts(finished_run: tuple[Path, SyntheticRun]) -> None:
    run_dir, run = finished_run
    with connect_readonly(run_dir / "traces.db") as conn:
        first = queries.list_rollouts(conn, limit=10)
        second = queries.list_rollouts(conn, limit=10, offset=10)
        errors = queries.list_rollouts(conn, outcome=names.OUTCOME_ERROR, limit=100)
        by_reward = queries.list_rollouts(conn, sort="reward", descending=True, min_reward=0.5)
    attempts = len(run.rollouts) + len(run.failures) + 6  # 6 retried rollouts (every 5th of 30)
    assert first["total"] == attempts and len(first["rows"]) == 10
    assert not {r["rollout_id"] for r in first["rows"]} & {r["rollout_id"] for r in second["rows"]}
    assert all(r["outcome"] == names.OUTCOME_ERROR for r in errors["rows"])
    assert errors["total"] == len(run.failures) + 6
    rewards = [r["reward"] for r in by_reward["rows"]]
    assert rewards == sorted(rewards, reverse=True) and min(rewards) >= 0.5
    row = first["rows"][0]
    assert row["span_count"] == 11 and len(row["trace_id"]) == 32 and row["link_count"] == 1


def test_show_has_every_attempt_and_the_job_link(finished_run, capsys) -> None:
    run_dir, run = finished_run
    detail = _cli_json(capsys, "show", str(run_dir), "4-0-a1")
    assert [a["rollout_id"] for a in detail["attempts"]] == ["4-0", "4-0-a1"]
    dispatch = next(s for s in detail["attempts"][0]["spans"] if s["name"] == names.SPAN_DISPATCH)
    assert dispatch["links"][0]["trace_id"] == run.job_trace_id
    assert dispatch["links"][0]["name"] == names.SPAN_JOB
    assert traces_cli.main(["show", str(run_dir), "4-0"]) == 0
    text = capsys.readouterr().out
    assert "link -> gym.job" in text and "llm_request" in text and "4-0-a1" in text
    assert traces_cli.main(["show", str(run_dir), "no-such"]) == 1


def test_slowest_breaks_down_self_time(finished_run, capsys) -> None:
    run_dir, _ = finished_run
    items = _cli_json(capsys, "slowest", str(run_dir), "-n", "3")
    assert len(items) == 3
    durations = [i["duration_ms"] for i in items]
    assert durations == sorted(durations, reverse=True)
    for item in items:
        # self times partition the root's duration (children lie inside their parents here)
        assert sum(item["self_time_ms"].values()) == pytest.approx(item["duration_ms"], rel=1e-6)
        assert next(iter(item["self_time_ms"])) == names.SPAN_ENGINE_REQUEST
    assert traces_cli.main(["slowest", str(run_dir), "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert "llm_request" in out and "self time by span name" in out


def test_ls_cli_and_overview(finished_run, capsys) -> None:
    run_dir, run = finished_run
    page = _cli_json(capsys, "ls", str(run_dir), "--limit", "5", "--outcome", "ok")
    assert len(page["rows"]) == 5 and page["total"] == len(run.rollouts)
    assert traces_cli.main(["ls", str(run_dir), "--limit", "3"]) == 0
    assert "rollouts 1-3 of" in capsys.readouterr().out
    with connect_readonly(run_dir / "traces.db") as conn:
        data = queries.overview(conn)
        found = queries.search(conn, run.rollouts[0]["trace_id"])
        missing = queries.search(conn, "nope")
    assert data["job_traces"][0]["trace_id"] == run.job_trace_id
    assert data["startup_traces"][0]["span_count"] == 3
    assert sum(b["count"] for b in data["duration_histogram"]) == data["dispatches"]
    assert data["run_ids"] == [run.run_id]
    assert found == {"kind": "trace", "trace_id": run.rollouts[0]["trace_id"]}
    assert missing["kind"] == "none"


def test_ls_options_are_the_page_keywords(finished_run, capsys) -> None:
    signature = inspect.signature(queries.list_rollouts)
    keywords = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(queries.PAGE_KEYS) == keywords
    run_dir, _ = finished_run
    rows = _cli_json(capsys, "ls", str(run_dir), "--outcome", "ok", "--sort", "reward", "--desc")[
        "rows"
    ]
    rewards = [row["reward"] for row in rows]
    assert rewards == sorted(rewards, reverse=True) and len(set(rewards)) > 1


def test_self_times_clip_overlapping_children() -> None:
    ms = 1_000_000
    spans = [
        {"span_id": "a", "parent_span_id": None, "name": "root", "start_ns": 0, "end_ns": 10 * ms},
        {"span_id": "b", "parent_span_id": "a", "name": "x", "start_ns": 1 * ms, "end_ns": 5 * ms},
        {"span_id": "c", "parent_span_id": "a", "name": "x", "start_ns": 3 * ms, "end_ns": 7 * ms},
    ]
    assert queries.self_times(spans) == {"x": 8.0, "root": 4.0}
