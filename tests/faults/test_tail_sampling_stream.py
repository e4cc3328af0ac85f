"""Tail sampling while the run goes: decided traces leave the store before the run ends.

A real run (the real CLI, its servers on loopback, a model that takes its time) long enough
that many rollouts end while others are still running. With an OTLP sink as the backend, a
kept rollout's spans reach the sink while the driver still runs, every span exactly once; a
dropped rollout's trace, once seen in the store, leaves it while the driver still runs. A
driver killed with ``kill -9`` mid-run leaves no dropped trace half kept that its resumed run
does not remove: the resumed run's ``traces check`` exits 0.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_support import killed_if_left_running, server_pids_alive, wait_for
from otlp_sink import OtlpSink
from telemetry_helpers import TracedJob, quick_rows, quick_servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BROKEN = [{"agent": "walker", "seed": f"not-a-number-{i}", "hops": 2} for i in range(4)]
#: Enough rows, two at a time with a model that answers after 0.15 s, for a run of many
#: seconds: plenty of rollouts are decided (and their grace period over) before it ends.
ROWS = (quick_rows(16, 8, 0) * 3) + BROKEN
TAIL = {"share": 0.3, "slow_percentile": None, "grace_s": 0.5}


def _write(job: TracedJob) -> None:
    telemetry = {"preset": "default", "tail_sampling": TAIL}
    job.write(
        quick_servers(0.15),
        ROWS,
        telemetry=telemetry,
        agent="solver",
        max_attempts=1,
        concurrency=2,
    )


def _start(job: TracedJob, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return job.start(
        "--no-table", env=job.env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a rows file the driver is still writing."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # the last line, half written
    return out


def _unfinished(job: TracedJob) -> bool:
    """Whether rows are still to be written (the driver is collecting, not ending)."""
    written = len(_rows(job.out / "rollouts.jsonl")) + len(_rows(job.out / "failures.jsonl"))
    return written < len(ROWS)


def _stored_traces(db: Path) -> set[str]:
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return {t.hex() for (t,) in conn.execute("SELECT DISTINCT trace_id FROM spans")}
    except sqlite3.Error:
        return set()  # not made yet


class _Watch:
    """Dropped rollouts' traces seen in the store, and those of them gone since."""

    def __init__(self, job: TracedJob) -> None:
        self.job = job
        self.seen: set[str] = set()
        self.gone: set[str] = set()

    def poll(self) -> bool:
        dropped = {
            r["trace_id"]
            for r in _rows(self.job.out / "rollouts.jsonl")
            if r.get("trace_sampled") is False
        }
        stored = _stored_traces(self.job.db)
        self.gone |= self.seen - stored  # present before, absent now: removed
        self.seen |= dropped & stored
        return bool(self.gone)


def test_kept_traces_reach_the_backend_and_dropped_ones_leave_while_the_run_goes(
    tmp_path: Path,
) -> None:
    job = TracedJob(tmp_path / "run")
    _write(job)
    watch = _Watch(job)
    with OtlpSink("ok") as sink:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
        }
        proc = _start(job, env)
        with killed_if_left_running(proc):

            def kept_one_arrived() -> bool:
                kept = {
                    bytes.fromhex(r["trace_id"])
                    for r in _rows(job.out / "rollouts.jsonl")
                    if r.get("trace_sampled", True)
                }
                # the sink first, then the rows: it arrived while rows were still to come
                return bool(kept & sink.trace_ids()) and _unfinished(job)

            # a kept rollout's spans are at the backend while rollouts still run
            assert wait_for(lambda: kept_one_arrived() or not _unfinished(job), timeout=240)
            assert _unfinished(job), "every rollout ended before a kept trace reached the backend"
            # a dropped rollout's trace, seen in the store, leaves it while rollouts still run
            assert wait_for(
                lambda: (watch.poll() and _unfinished(job)) or not _unfinished(job),
                timeout=240,
                interval=0.3,
            )
            assert _unfinished(job), "every rollout ended before a dropped trace left the store"
            _, stderr = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1), stderr[-3000:]
        arrivals = sink.arrivals()
        assert sink.duplicates() == 0  # every span sent once

    # the backend got exactly what the store kept: every failure, every kept rollout, whole
    with sqlite3.connect(job.db) as conn:
        stored = dict(conn.execute("SELECT span_id, trace_id FROM spans"))
    assert set(arrivals) == set(stored)
    assert all(arrivals[s][0] == t for s, t in stored.items())
    kept_traces = {t.hex() for t in stored.values()}
    assert {f["trace_id"] for f in job.failures} <= kept_traces
    assert len(job.failures) == len(BROKEN)
    dropped = [r for r in job.rollouts if r.get("trace_sampled") is False]
    kept = [r for r in job.rollouts if r.get("trace_sampled", True)]
    assert dropped and kept
    assert not {r["trace_id"] for r in dropped} & kept_traces
    assert {r["trace_id"] for r in kept} <= kept_traces
    assert not watch.gone & kept_traces

    counts = json.loads((job.out / "summary.json").read_text())["telemetry"]["tail_sampling"]
    assert counts["spans_forwarded"] == len(arrivals) and counts["spans_forward_failed"] == 0
    assert counts["traces_dropped"] == len(dropped) == counts["traces_removed"]
    assert 0 < counts["spans_removed_before_end"] <= counts["spans_removed"]
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]


def test_kill_9_mid_run_leaves_nothing_half_kept_after_the_resume(tmp_path: Path) -> None:
    job = TracedJob(tmp_path / "run")
    _write(job)
    watch = _Watch(job)
    proc = _start(job)
    with killed_if_left_running(proc):
        # killed once dropped traces have been removed while it ran
        assert wait_for(lambda: watch.poll() or proc.poll() is not None, timeout=240, interval=0.3)
        assert proc.poll() is None, "the run ended before any dropped trace left the store"
        servers = set(server_pids_alive(under=str(job.root)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert wait_for(lambda: not (servers & set(server_pids_alive())), timeout=30)
    first = len(job.rollouts) + len(job.failures)
    assert first < len(ROWS)

    resumed = job.run(timeout=300)
    assert resumed.returncode in (0, 1), resumed.stderr[-3000:]
    assert len(job.rollouts) + len(job.failures) == len(ROWS)
    stored = _stored_traces(job.db)
    dropped = [r for r in job.rollouts if r.get("trace_sampled") is False]
    assert dropped and not {r["trace_id"] for r in dropped} & stored  # both sessions'
    assert {f["trace_id"] for f in job.failures} <= stored  # every failure kept
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
