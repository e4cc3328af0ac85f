"""Telemetry failures never decide a rollout: the store killed mid-run is restarted and the
gap counted; an OTLP endpoint that is closed, failing or slow loses spans, counted and warned."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator

import pytest
from e2e_support import Job, killed_if_left_running
from faults_support import assert_exact_accounting, fault_agent, signal_store_once
from telemetry_helpers import closed_port, failing_endpoint

pytestmark = pytest.mark.e2e

ROWS = 150


def test_the_trace_store_killed_mid_run_is_restarted_and_the_gap_counted(
    job: Job, no_leftover_servers: None
) -> None:
    job.write(
        {"a": fault_agent(delay_s=0.05)},
        [{"q": i} for i in range(ROWS)],
        agent="a",
        concurrency=4,
        telemetry={"preset": "default", "exporter": "auto", "schedule_delay_ms": 100},
    )
    proc = job.start(telemetry=True, stderr=subprocess.PIPE)
    with killed_if_left_running(proc):
        signal_store_once(job, 20, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "the trace store died (exit status -9)" in err
    assert "the trace store is back at http://127.0.0.1:" in err
    assert_exact_accounting(job, ROWS)
    assert job.summary["failed"] == 0  # telemetry never fails a rollout
    telemetry = job.summary["telemetry"]
    assert telemetry["store_deaths"] == 1 and telemetry["store_restarts"] == 1
    assert telemetry["store_down_s"] > 0
    assert any("the trace store died 1 time(s)" in w for w in job.summary["warnings"])
    with sqlite3.connect(job.out / "traces.db") as conn:
        (spans,) = conn.execute("SELECT count(*) FROM spans").fetchone()
    assert spans > 0  # the store took spans again after its restart


@pytest.fixture
def answering_500() -> Iterator[str]:
    """An OTLP endpoint answering 500 to every export."""
    with failing_endpoint() as (url, _handler):
        yield url


@pytest.fixture
def tarpit_endpoint() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never reads or answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def _closed_endpoint() -> str:
    return f"http://127.0.0.1:{closed_port()}"


@pytest.mark.parametrize("endpoint_kind", ["closed", "500", "tarpit"])
def test_an_unusable_otlp_endpoint_loses_spans_counted_and_warned_never_rollouts(
    job: Job,
    no_leftover_servers: None,
    endpoint_kind: str,
    request: pytest.FixtureRequest,
) -> None:
    endpoint = {
        "closed": _closed_endpoint,
        "500": lambda: request.getfixturevalue("answering_500"),
        "tarpit": lambda: request.getfixturevalue("tarpit_endpoint"),
    }[endpoint_kind]()
    job.write(
        {"a": fault_agent(delay_s=0.0)},
        [{"q": i} for i in range(30)],
        agent="a",
        telemetry={"preset": "default", "exporter": "otlp", "endpoint": endpoint},
    )
    proc = job.run(timeout=300, telemetry=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_exact_accounting(job, 30)
    assert job.summary["failed"] == 0
    telemetry = job.summary["telemetry"]
    if endpoint_kind == "closed":  # nothing listens: found out at the start, in one line
        assert telemetry["exporter_unreachable"] == endpoint
        assert proc.stderr.count(f"the OTLP endpoint {endpoint} is unreachable") == 1
        return
    # a tarpit accepts and never answers: whether it kept a request is unknown, not "dropped"
    lost = telemetry["spans_dropped"] + telemetry["spans_unknown"]
    assert lost > 0
    assert f"rollgym: telemetry: 0 of {lost} span(s) delivered" in proc.stderr, proc.stderr


def test_require_exporter_stops_at_the_start_when_the_endpoint_is_dead(
    job: Job, no_leftover_servers: None
) -> None:
    endpoint = _closed_endpoint()
    job.write(
        {"a": fault_agent(delay_s=0.0)},
        [{"q": i} for i in range(2)],
        agent="a",
        telemetry={"preset": "default", "endpoint": endpoint, "require_exporter": True},
    )
    proc = job.run(timeout=120, telemetry=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "unreachable" in ln]
    assert "telemetry.require_exporter" in line and endpoint in line
    assert job.rollouts == [] and job.failures == []  # nothing ran, nothing half-written
