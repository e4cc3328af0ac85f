"""The viewer's run routes (reading/run_views.py) over a real store and its run's files.

They read the store's typed rows (SpanRow, FailedAttempt, ...) and failures.jsonl; served by
aiohttp's test server on loopback, as `traces serve --run-dir` mounts them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from rollgym.reading.failures import FailedAttempt
from rollgym.reading.query_rows import DispatchRow
from rollgym.reading.run_views import run_routes
from rollgym.reading.viewer_routes import DB_KEY
from synthetic_run import SyntheticRun


async def _get_all(run_dir: Path, paths: list[str]) -> list[tuple[int, object]]:
    app = web.Application()
    app[DB_KEY] = run_dir / "traces.db"
    run_routes(run_dir, None)(app)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        answers = []
        for path in paths:
            response = await client.get(path)
            answers.append((response.status, await response.json()))
        return answers


def test_failures_failed_rows_and_a_conversation(finished_run: tuple[Path, SyntheticRun]) -> None:
    run_dir, run = finished_run
    (status_f, failures), (status_a, attempts), (status_c, view) = asyncio.run(
        _get_all(run_dir, ["/api/failures", "/api/failed?level=attempt", "/api/conversation/4-0"])
    )
    assert status_f == status_a == status_c == 200
    assert isinstance(failures, dict) and isinstance(attempts, dict) and isinstance(view, dict)
    assert failures["attempts"]["failed"] == len(run.failures) + 6  # 6 retried rollouts
    assert failures["rollouts"]["failed"] == len(run.failures)
    rows = attempts["rows"]
    assert rows and all(
        set(row) == set(FailedAttempt.__annotations__) | set(DispatchRow.__annotations__)
        for row in rows
    )
    assert all(row["error_kind"] for row in rows)
    assert {a["rollout_id"] for a in view["attempt_errors"]} <= {"4-0", "4-0-a1"}


def test_every_run_route_is_mounted(finished_run: tuple[Path, SyntheticRun]) -> None:
    """The runs list names the one run served; compare without a second run is a 404 that
    says how to serve two (not aiohttp's 404 for a route that was never mounted)."""
    run_dir, _ = finished_run
    (status_r, runs), (status_c, compare) = asyncio.run(
        _get_all(run_dir, ["/api/runs", "/api/compare"])
    )
    assert status_r == 200 and isinstance(runs, dict)
    assert [entry["role"] for entry in runs["runs"]] == ["a"] and runs["can_compare"] is False
    assert status_c == 404 and isinstance(compare, dict)
    assert "--compare" in compare["error"]
