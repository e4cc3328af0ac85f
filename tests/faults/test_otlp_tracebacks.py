"""A failing or full OTLP path says so in one line each, and never prints a traceback.

A dead endpoint (a closed loopback port), one answering 500 to everything, and the run's own
trace store on a full disk: each used to end with ``Exception ignored when trying to write to
the signal wakeup fd ... _on_stop_retrying ... OSError: [Errno 9] Bad file descriptor`` from
the servers' forked exporter children (the wakeup descriptor of their parent's event loop,
closed in the child), on the console and in the servers' logs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import Job
from faults_support import fault_agent
from telemetry_helpers import TracedJob, closed_port, failing_endpoint, quickstart_job

pytestmark = pytest.mark.e2e

#: The tmpfs the run's output is put on (the ``small_disk`` fixture).
DISK_SIZE = "300k"

_NOT_WANTED = ("Traceback", "Exception ignored", "Bad file descriptor")


def _assert_quiet(text: str, where: str) -> None:
    for marker in _NOT_WANTED:
        assert marker not in text, f"{where}: {text[-2000:]}"


def _logs_quiet(out: Path) -> None:
    for log in sorted((out / "logs").glob("*.log")):
        _assert_quiet(log.read_text(errors="replace"), log.name)


def _traced(root: Path, url: str) -> tuple[TracedJob, str]:
    """The run's job and its console (stderr)."""
    job = quickstart_job(root, telemetry={"flush_timeout_s": 5.0}, repeats=3, concurrency=32)
    otlp = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp"}
    proc = job.run(env={**otlp, "OTEL_EXPORTER_OTLP_ENDPOINT": url}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_quiet(proc.stderr, "console")
    assert "span(s) dropped (export_failed)" in proc.stderr  # the one line that says it
    return job, proc.stderr


def test_a_dead_endpoint_is_reported_without_a_traceback(tmp_path: Path) -> None:
    job, console = _traced(tmp_path, f"http://127.0.0.1:{closed_port()}")
    _logs_quiet(job.out)
    assert "is unreachable (connection refused" in console  # rollgym's own line says it once
    # ... and the SDK exporters' retry lines do not say it again
    assert "Transient error" not in console, console[-3000:]


def test_an_endpoint_answering_500_is_reported_without_a_traceback(tmp_path: Path) -> None:
    with failing_endpoint() as (url, _handler):
        job, _ = _traced(tmp_path, url)
    _logs_quiet(job.out)


def test_a_full_disk_under_the_trace_store_ends_in_one_line_without_a_traceback(
    job: Job, small_disk: Path, no_leftover_servers: None
) -> None:
    job.write(
        {"a": fault_agent(delay_s=0.0)},
        [{"q": i, "padding": "x" * 200} for i in range(3000)],
        agent="a",
        concurrency=8,
        telemetry={"preset": "default", "exporter": "auto", "flush_timeout_s": 5},
    )
    proc = job.run(timeout=300, telemetry=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _assert_quiet(proc.stderr, "console")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rollgym: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], proc.stderr
    _logs_quiet(small_disk)
