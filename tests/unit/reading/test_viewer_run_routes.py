"""The viewer's run routes (reading/run_views.py) over a real store and its run's files.

They read the store's typed rows (SpanRow, FailedAttempt, ...) and failures.jsonl; served by
aiohttp's test server on loopback, as `traces serve --run-dir` mounts them.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from rollgym.reading.failures import FailedAttempt
from rollgym.reading.query_rows import DispatchRow
from rollgym.reading.run_views import run_routes, viewer
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


def test_a_request_that_fails_on_the_runs_files_answers_its_reason_in_one_line(
    finished_run: tuple[Path, SyntheticRun], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder where failures.jsonl should be: the routes that read it answer 500 with the
    reason (the page shows it) and the store's log gets one line, not a traceback; the
    overview, whose summary.json is a folder too, still answers without it."""
    source, _ = finished_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    for name in ("failures.jsonl", "summary.json"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).mkdir()

    async def get_all() -> list[tuple[int, object]]:
        app = web.Application()
        viewer(run_dir / "traces.db", run_dir, None)(app)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            return [
                (response.status, await response.json())
                for response in [await client.get(p) for p in ("/api/failures", "/api/overview")]
            ]

    (status_f, failures), (status_o, overview) = asyncio.run(get_all())
    reason = f"{run_dir / 'failures.jsonl'}: Is a directory"
    assert (status_f, failures) == (500, {"error": reason})
    assert status_o == 200 and isinstance(overview, dict) and overview["summary"] is None
    said = capsys.readouterr().err
    assert "Traceback" not in said
    assert said.splitlines() == [f"rollgym traces serve: GET /api/failures: {reason}"], said
