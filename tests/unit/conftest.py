"""Fixtures: a real trace store process on 127.0.0.1 and a synthetic run exported into it
(the store's tests in tracestore/ and the read side's in reading/ share them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
from synthetic_run import SyntheticRun, emit_run, write_outputs


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStoreProcess]:
    process = start_trace_store(
        tmp_path / "traces.db", tmp_path / "store.log", max_body_bytes=256 * 1024
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SyntheticRun]:
    """A stopped store holding a 30-rollout synthetic run, with its output files."""
    run_dir = tmp_path_factory.mktemp("run")
    process = start_trace_store(run_dir / "traces.db", run_dir / "store.log")
    try:
        run = emit_run(lambda: OTLPSpanExporter(endpoint=process.traces_endpoint), rollouts=30)
    finally:
        assert process.stop() == 0
    write_outputs(run_dir, run)
    return run_dir, run
