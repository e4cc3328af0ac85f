"""Traces that survive what happens to a run's processes, and a ``traces check`` that excuses
only what it can prove was lost, by name.

- the driver killed (``kill -9``) two seconds into a cold start: every recorded rollout has
  its trace in ``traces.db``, but those that ended within the check's bounded window before
  the kill, each named;
- the trace store stopped (SIGSTOP) mid-run, then continued: the run is exact and the check
  passes (what the exporters could not deliver is counted as a loss, never as a violation);
- the disk of the run filled by another writer, freed, and the run resumed: the same.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import Job, killed_if_left_running, server_pids_alive, wait_for
from faults_support import assert_exact_accounting, fault_agent, signal_store_once

from server_specs import quickstart_servers, simulated_model

pytestmark = pytest.mark.e2e

#: The tmpfs the run's output is put on (the ``small_disk`` fixture).
DISK_SIZE = "64m"

QUICKSTART_ROWS = Path(__file__).resolve().parents[2] / "examples" / "quickstart.jsonl"
#: How long the store is stopped (the held-out matrix stopped it for 30 s).
STORE_STOP_S = float(os.environ.get("ROLLGYM_FAULT_STORE_STOP_S", "30"))


def _check(job: Job) -> tuple[int, dict[str, Any]]:
    """``rollgym traces check RUN --json``: its exit status and report."""
    check = subprocess.run(
        [*job.command()[:3], "traces", "check", str(job.out), "--json"],
        env=job.env(telemetry=True),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in check.stderr, check.stderr
    report: dict[str, Any] = orjson.loads(check.stdout)
    return check.returncode, report


def _traces_in_store(job: Job, table: str = "dispatches") -> set[str]:
    """Trace ids with a dispatch span (the last of a rollout's spans to end) in traces.db;
    ``table="spans"``: with any span."""
    if not (job.out / "traces.db").exists():  # the store never committed anything
        return set()
    with sqlite3.connect(f"file:{job.out / 'traces.db'}?mode=ro", uri=True) as conn:
        return {bytes(t).hex() for (t,) in conn.execute(f"SELECT DISTINCT trace_id FROM {table}")}


def _cold_env(job: Job, tmp_path: Path) -> dict[str, str]:
    """No compiled bytecode in any process (an empty, unwritten cache): the first run after
    an install, when every process starts slowest."""
    env = job.env(telemetry=True)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "no-bytecode")
    return env


def test_driver_killed_two_seconds_into_a_cold_start_keeps_every_recorded_rollouts_trace(
    job: Job, tmp_path: Path, no_leftover_servers: None
) -> None:
    rows = 20_000
    job.write(
        {"a": fault_agent(delay_s=0.02)},
        [{"q": i} for i in range(rows)],
        agent="a",
        concurrency=16,
        telemetry={"preset": "default", "exporter": "auto"},
    )
    env = _cold_env(job, tmp_path)
    proc = job.start(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") > 0, timeout=180)
        time.sleep(2.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    recorded = job.rollouts
    assert 0 < len(recorded) < rows
    whole = _traces_in_store(job)
    missing = [r for r in recorded if r["trace_id"] not in _traces_in_store(job, "spans")]
    # a rollout's dispatch span is its last: a rollout without it lost spans to the kill;
    # only those that ended within a bounded window before the last recorded one may have
    last = max(r["finished_at"] for r in recorded)
    cut = [r for r in recorded if r["trace_id"] not in whole]
    late = [round(last - r["finished_at"], 2) for r in cut if r["finished_at"] < last - 2.0]
    assert late == [], f"{len(late)} of {len(recorded)} rollouts lost spans, up to {max(late)} s"
    assert len(cut) < len(recorded) / 2, (len(cut), len(recorded))
    code, report = _check(job)
    assert code == 0, report["violations"][:5]
    # every row without a trace is counted (the first 50 named), and only those
    assert report["stats"].get("lost_with_killed_process", 0) == len(missing)
    excused = report["lost_with_killed_process"]
    assert {e["rollout_id"] for e in excused} <= {r["rollout_id"] for r in missing}
    assert len(excused) == min(50, len(missing))
    assert report["history"]["kill_window_s"] <= 2.0


def _quickstart(job: Job, repeats: int, concurrency: int) -> int:
    """The quickstart's servers and rows (every kind of server, many spans a rollout);
    returns the number of rows."""
    rows = [orjson.loads(line) for line in QUICKSTART_ROWS.read_bytes().splitlines() if line]
    job.write(
        quickstart_servers(model=simulated_model(0.01, accuracy=0.8)),
        rows,
        agent="solver",
        environment_routes={"keychain_episodes": "keys"},
        repeats=repeats,
        concurrency=concurrency,
        max_attempts=3,
        timeout_s=120,
        telemetry={"preset": "default", "exporter": "auto"},
    )
    return len(rows)


@pytest.mark.parametrize("stop_s", [STORE_STOP_S])
def test_the_trace_store_stopped_then_continued_leaves_a_run_the_check_passes(
    job: Job, no_leftover_servers: None, stop_s: float
) -> None:
    repeats = 30
    rows = _quickstart(job, repeats=repeats, concurrency=32)
    proc = job.start(telemetry=True, stderr=subprocess.PIPE)
    with killed_if_left_running(proc):
        pid = signal_store_once(job, 300, signal.SIGSTOP)
        try:
            time.sleep(stop_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=300 + stop_s)
    assert proc.returncode == 0, out + err
    assert_exact_accounting(job, rows, repeats=repeats)
    code, report = _check(job)
    assert code == 0, (report["violation_counts"], report["violations"][:5])
    telemetry = job.summary["telemetry"]
    lost = telemetry["spans_dropped"] + telemetry["spans_unknown"]
    assert lost > 0  # requests in flight when the store stopped had no answer in time
    # the session's losses are kept with it (a resume rewrites summary.json)
    ends = [orjson.loads(line) for line in (job.out / "sessions.jsonl").read_bytes().splitlines()]
    (end,) = [e for e in ends if e.get("event") == "end"]
    assert sum(end["spans_lost"].values()) == lost
    with sqlite3.connect(f"file:{job.out / 'traces.db'}?mode=ro", uri=True) as conn:
        (stored,) = conn.execute("SELECT COUNT(*) FROM spans").fetchone()
    if stored < telemetry["spans_exported"] + lost:  # some were lost: said as losses, by name
        excused = report["counted_losses"]
        assert 0 < excused["spans_missing_at_least"] <= lost, excused
        assert sum(excused["spans_counted_lost"].values()) == lost


def _fill(path: Path) -> None:
    """Another writer fills the disk under ``path`` until it is full."""
    chunk = b"\0" * (1 << 20)
    with contextlib.suppress(OSError), path.open("wb") as out:
        while True:
            out.write(chunk)
            out.flush()


def test_a_disk_filled_by_another_writer_then_freed_resumes_to_a_run_the_check_passes(
    job: Job, small_disk: Path, no_leftover_servers: None
) -> None:
    repeats = 10  # the resume's traces fit the 64 MiB disk with room to spare
    rows = _quickstart(job, repeats=repeats, concurrency=32)
    proc = job.start(telemetry=True, stderr=subprocess.PIPE)
    filler = small_disk / "filler"
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 300, timeout=180)
        _fill(filler)
        started = time.monotonic()
        out, err = proc.communicate(timeout=300)
        stopped_s = time.monotonic() - started
    assert proc.returncode == 1, out + err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("rollgym: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], err
    assert stopped_s < 30, f"the run took {stopped_s:.0f} s to stop on a full disk"
    assert (small_disk / "summary.json").exists(), "summary.json was not written"
    filler.unlink()  # the other writer's file goes; the same command resumes
    resumed = job.run(timeout=600, telemetry=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_exact_accounting(job, rows, repeats=repeats)
    code, report = _check(job)
    assert code == 0, (report["violation_counts"], report["violations"][:5])


def _overwritten(db: Path) -> None:
    db.write_bytes(os.urandom(64 * 1024))


def _truncated(db: Path) -> None:
    """Cut inside its second page (a copy or a disk that stopped short): the SQLite header is
    whole, so only SQLite itself, reading the schema, finds the file damaged."""
    db.write_bytes(db.read_bytes()[:5000])


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_overwritten, "is not a SQLite database"),
        (_truncated, "is not a readable trace store (database disk image is malformed)"),
    ],
    ids=["overwritten", "truncated"],
)
def test_a_resume_on_a_corrupt_trace_store_names_the_file_in_one_line_and_goes_on(
    job: Job, no_leftover_servers: None, damage: Callable[[Path], None], said: str
) -> None:
    job.write(
        {"a": fault_agent(delay_s=0.0)},
        [{"q": i} for i in range(40)],
        agent="a",
        telemetry={"preset": "default", "exporter": "auto"},
    )
    first = job.run(timeout=300, telemetry=True)
    assert first.returncode == 0, first.stdout + first.stderr
    kept = job.out.joinpath("rollouts.jsonl").read_bytes().splitlines(keepends=True)[:10]
    job.out.joinpath("rollouts.jsonl").write_bytes(b"".join(kept))  # 30 rollouts left to run
    db = job.out / "traces.db"
    damage(db)
    for leftover in ("traces.db-wal", "traces.db-shm"):
        (job.out / leftover).unlink(missing_ok=True)
    started = time.monotonic()
    resumed = job.run(timeout=300, telemetry=True)
    took_s = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stderr
    (line,) = [ln for ln in resumed.stderr.splitlines() if str(db) in ln]
    assert said in line and f"mv {db} {db}.bad" in line, line
    assert took_s < 30, f"the resume took {took_s:.0f} s"
    assert_exact_accounting(job, 40)
    # never restarted in vain: the file that refused it would refuse it again
    assert "the trace store died" not in resumed.stderr
    assert job.summary["telemetry"]["store_deaths"] == 0
    assert any(said in warning for warning in job.summary["warnings"]), job.summary["warnings"]
