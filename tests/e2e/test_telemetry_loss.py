"""A dead or failing OTLP endpoint never slows or fails rollouts.

Three runs of the same job side by side: tracing off, the exporter pointed at a closed loopback
port, and at a loopback endpoint answering 500 to everything. Every rollout must complete with
the same result, and the run must not take much longer than the run with tracing off (a sanity
bound, not a benchmark: the machine is shared).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from telemetry_helpers import TracedJob, closed_port, failing_endpoint, quickstart_job

pytestmark = pytest.mark.e2e

ROLLOUTS = 120
#: ``telemetry.flush_timeout_s`` of these runs: a dead endpoint is what the option bounds.
FLUSH_S = 5.0


def _run(root: Path, env: dict[str, str]) -> tuple[float, TracedJob]:
    job = quickstart_job(
        root, telemetry={"flush_timeout_s": FLUSH_S}, repeats=3, concurrency=32, latency_s=0.01
    )
    start = time.monotonic()
    proc = job.run(env=env)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job.stderr = proc.stderr  # type: ignore[attr-defined]
    return wall, job


def _results(job: TracedJob) -> dict[str, Any]:
    return {r["rollout_id"]: (r["reward"], r["result"]) for r in job.rollouts}


def _collection_s(job: TracedJob) -> float:
    """From the first dispatch to the last answer: the rollouts' own time."""
    records = job.rollouts
    return max(r["finished_at"] for r in records) - min(r["started_at"] for r in records)


class LossRuns:
    """The same job three times: tracing off, a closed port, an endpoint answering 500."""

    def __init__(self, root: Path) -> None:
        self.off_wall, self.off = _run(root / "off", {"OTEL_TRACES_EXPORTER": "none"})
        otlp = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp"}
        dead_url = f"http://127.0.0.1:{closed_port()}"
        dead_wall, dead = _run(root / "dead", {**otlp, "OTEL_EXPORTER_OTLP_ENDPOINT": dead_url})
        with failing_endpoint() as (url, handler):
            failing_wall, failing = _run(
                root / "failing", {**otlp, "OTEL_EXPORTER_OTLP_ENDPOINT": url}
            )
            self.failing_hits = handler.hits
        self.traced = {"dead": (dead, dead_wall), "500": (failing, failing_wall)}


@pytest.fixture(scope="module")
def loss(tmp_path_factory: pytest.TempPathFactory) -> LossRuns:
    return LossRuns(tmp_path_factory.mktemp("loss"))


@pytest.mark.parametrize("label", ["dead", "500"])
def test_every_rollout_completes_with_the_same_result(loss: LossRuns, label: str) -> None:
    assert loss.off.summary["completed"] == ROLLOUTS and loss.off.summary["failed"] == 0
    job, _ = loss.traced[label]
    summary = job.summary
    assert summary["status"] == "completed"
    assert summary["completed"] == ROLLOUTS and summary["failed"] == 0
    assert _results(job) == _results(loss.off)
    assert not (job.out / "traces.db").exists()
    if label == "dead":  # found out at the start: the run went on exporting nothing
        assert job.summary["telemetry"]["exporter_unreachable"].startswith("http://127.0.0.1:")
        return
    # tracing was on (each rollout has a trace id) although nothing could be delivered
    assert all(r["trace_id"] for r in job.rollouts)
    if label == "500":
        assert loss.failing_hits > 0, "the exporter never reached the failing endpoint"


@pytest.mark.parametrize("label", ["dead", "500"])
def test_a_dead_endpoint_does_not_slow_the_run(loss: LossRuns, label: str) -> None:
    job, wall = loss.traced[label]
    assert _collection_s(job) < 2 * _collection_s(loss.off) + 5
    # The run's end includes bounded flushes: the servers' (in parallel), then the driver's,
    # each at most FLUSH_S (telemetry.flush_timeout_s); nothing else may grow.
    flushes = 2 * FLUSH_S
    assert wall < 2 * loss.off_wall + 5 + flushes, (wall, loss.off_wall)


def test_a_dead_endpoint_is_said_once_at_the_start_and_in_the_summary(loss: LossRuns) -> None:
    job, _ = loss.traced["dead"]
    telemetry = job.summary["telemetry"]
    endpoint = telemetry["exporter_unreachable"]
    stderr: str = job.stderr  # type: ignore[attr-defined]
    assert stderr.count(f"the OTLP endpoint {endpoint} is unreachable") == 1, stderr[-2000:]
    # the spans waited for the endpoint and were counted as dropped when it never came
    assert telemetry["spans_exported"] == 0 and telemetry["spans_dropped"] > 0
    assert any(endpoint in warning for warning in job.summary["warnings"])
    assert "raise telemetry.flush_timeout_s" not in stderr


@pytest.mark.parametrize("label", ["500"])
def test_undelivered_spans_are_reported_as_dropped(loss: LossRuns, label: str) -> None:
    job, _ = loss.traced[label]
    telemetry = job.summary["telemetry"]
    assert telemetry["spans_exported"] == 0
    # every rollout produced at least its dispatch, client, server and gym.rollout spans
    assert telemetry["spans_dropped"] >= 4 * ROLLOUTS, telemetry
    # and the loss is said loudly at the end of the run, with its count
    stderr: str = job.stderr  # type: ignore[attr-defined]
    dropped = telemetry["spans_dropped"]
    assert f"0 of {dropped} span(s) delivered" in stderr, stderr[-2000:]
    assert f"{dropped} NOT delivered" in stderr
    assert telemetry["spans_dropped_by_reason"] == {"export_failed": dropped}
    (warning,) = [w for w in job.summary["warnings"] if "export_failed" in w]
    assert "check the endpoint" in warning and "flush_timeout_s" not in warning
