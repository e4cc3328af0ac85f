"""The viewer over a real ``rollgym run``: launched servers, real OTLP into the run's store.

The synthetic-run test covers the viewer's controls; this one proves the whole path a user
takes: run a job, serve its ``traces.db`` with ``rollgym traces serve``, open a rollout in
headless Chromium and see every process's spans in its waterfall, down to the engine span.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollgym.telemetry import names
from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

from .conftest import BROWSER_MARKS, doc_shot, span_details, waterfall_of

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


def run_example(tmp_path_factory: pytest.TempPathFactory, example: str) -> Path:
    """Run ``examples/<example>.yaml`` once (one repeat) into a fresh folder; its run dir."""
    out = tmp_path_factory.mktemp(example) / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollgym",
            "run",
            str(ROOT / "examples" / f"{example}.yaml"),
            f"run.output_dir={out}",
            "run.repeats=1",
            "--no-table",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def serve_store(run: Path) -> TraceStoreProcess:
    return start_trace_store(run / "traces.db", run / "logs" / "viewer.log", run_dir=run)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_example(tmp_path_factory, "quickstart")


@pytest.fixture(scope="module")
def store(real_run: Path) -> Iterator[TraceStoreProcess]:
    process = serve_store(real_run)
    try:
        yield process
    finally:
        process.stop()


def test_open_a_real_rollout_and_see_every_process(store: TraceStoreProcess, page: Any) -> None:
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")
    body = page.inner_text("body")
    for dispatch_name in ("solver", "walker", "keys"):  # both routing kinds
        assert dispatch_name in body
    doc_shot(page, "viewer-real-overview.png")
    span_names = waterfall_of(page, "50-0")  # the first keychain row: a multi-turn tool rollout
    for expected in (
        names.SPAN_DISPATCH,
        names.SPAN_ROLLOUT,
        names.SPAN_MODEL_CHAT,
        names.SPAN_ENGINE_REQUEST,
        names.SPAN_ENV_TOOL,
        names.SPAN_VERIFY,
    ):
        assert expected in span_names, (expected, span_names)
    details = span_details(page, names.SPAN_ENGINE_REQUEST)
    assert "chatcmpl-50-0.0" in details
    doc_shot(page, "viewer-real-rollout.png")


def test_a_sandboxed_rollout_shows_its_sandbox_spans(
    tmp_path_factory: pytest.TempPathFactory, page: Any
) -> None:
    from rollgym.sandbox import unavailable_reason

    if unavailable_reason():
        pytest.skip(f"no sandbox here: {unavailable_reason()}")
    process = serve_store(run_example(tmp_path_factory, "code"))
    try:
        page.goto(process.endpoint + "/")
        page.wait_for_selector("#rollout-table tr.row")
        span_names = waterfall_of(page, "0-0")  # the first code row: public tests, then verify
        for expected in (
            names.SPAN_SANDBOX_CREATE,
            names.SPAN_SANDBOX_EXEC,
            names.SPAN_SANDBOX_DESTROY,
        ):
            assert expected in span_names, (expected, span_names)
        details = span_details(page, names.SPAN_SANDBOX_EXEC)
        assert names.SANDBOX_EXIT_CODE in details and names.SANDBOX_WALL_TIME in details
        doc_shot(page, "viewer-sandbox-rollout.png")
    finally:
        process.stop()
