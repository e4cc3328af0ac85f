"""Fixtures: a real trace store process on 127.0.0.1 and a synthetic run exported into it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
from synthetic_run import SyntheticRun, emit_run


def write_outputs(run_dir: Path, run: SyntheticRun) -> None:
    """What the driver writes next to traces.db (the fields check reads)."""
    with (run_dir / "rollouts.jsonl").open("w") as out:
        for row in run.rollouts:
            out.write(json.dumps(row) + "\n")
    with (run_dir / "failures.jsonl").open("w") as out:
        for row in run.failures:
            out.write(json.dumps(row) + "\n")
    (run_dir / "summary.json").write_text(
        json.dumps(
            {
                "run_id": run.run_id,
                "requested": len(run.rollouts) + len(run.failures),
                "completed": len(run.rollouts),
                "failed": len(run.failures),
            }
        )
    )


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
