"""Tail sampling with traces sent to an OTLP backend: a real run exporting to a real OTLP/HTTP
sink on loopback. Every process's spans wait in the run's store for the driver's decision; the
backend then receives exactly the kept traces (every failed rollout's among them) and no span
of a dropped one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from otlp_sink import OtlpSink
from telemetry_helpers import TracedJob, closed_port, quick_rows, quick_servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BROKEN = [{"agent": "walker", "seed": f"not-a-number-{i}", "hops": 2} for i in range(3)]
ROWS = quick_rows(16, 8, 0) + BROKEN


def _stored(db: Path) -> dict[bytes, bytes]:
    """Every span id in the store, with its trace id."""
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT span_id, trace_id FROM spans"))


def test_the_backend_receives_exactly_the_kept_traces(tmp_path: Path) -> None:
    job = TracedJob(tmp_path / "run")
    telemetry = {"preset": "default", "tail_sampling": {"share": 0.25, "slow_percentile": None}}
    job.write(quick_servers(0.0), ROWS, telemetry=telemetry, agent="solver", max_attempts=1)
    with OtlpSink("ok") as sink:
        proc = job.run(
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_METRICS_EXPORTER": "none",
            }
        )
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        received = sink.span_ids()
        assert sink.duplicates() == 0

    # the store the spans waited in holds what was kept; the backend got exactly that
    stored = _stored(job.db)
    assert received == set(stored)
    kept_traces = {t.hex() for t in stored.values()}
    assert len(job.failures) == len(BROKEN)
    for failure in job.failures:
        assert failure["trace_id"] in kept_traces  # every failure kept
    dropped = [r for r in job.rollouts if r.get("trace_sampled") is False]
    kept = [r for r in job.rollouts if r.get("trace_sampled", True)]
    assert dropped and kept
    assert not {r["trace_id"] for r in dropped} & kept_traces
    assert {r["trace_id"] for r in kept} <= kept_traces

    counts = json.loads((job.out / "summary.json").read_text())["telemetry"]["tail_sampling"]
    assert counts["spans_forwarded"] == len(received) and counts["spans_forward_failed"] == 0
    assert counts["traces_kept_by_reason"]["failed"] == len(BROKEN)
    assert counts["traces_dropped"] == len(dropped)
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]


def test_a_dead_backend_is_counted_failed_and_the_store_keeps_every_kept_trace(
    tmp_path: Path,
) -> None:
    """Nothing listens at the endpoint: the run ends as usual; every kept span is counted
    failed (a refused batch pauses the sending: the rest is counted without being tried),
    none forwarded, and the store keeps them all."""
    job = TracedJob(tmp_path / "run")
    telemetry = {"preset": "default", "tail_sampling": {"share": 0.25, "slow_percentile": None}}
    job.write(quick_servers(0.0), ROWS, telemetry=telemetry, agent="solver", max_attempts=1)
    proc = job.run(
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
        }
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    counts = json.loads((job.out / "summary.json").read_text())["telemetry"]["tail_sampling"]
    assert counts["spans_forwarded"] == 0
    assert counts["spans_forward_failed"] == len(_stored(job.db)) > 0
    assert "kept span(s) were not accepted" in proc.stderr
    assert {f["trace_id"] for f in job.failures} <= {t.hex() for t in _stored(job.db).values()}
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
