"""kill -9 of the driver: its servers leave promptly, and a resume finishes the run exactly."""

from __future__ import annotations

import random
import signal
import subprocess
import time

import orjson
import pytest
from e2e_support import Job, server_pids_alive, wait_for
from faults_support import assert_exact_accounting, fault_agent

pytestmark = pytest.mark.e2e


def _kill_driver(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_servers_stop_at_once_without_flushing_to_the_dead_store(
    job: Job, no_leftover_servers: None
) -> None:
    """Traces go to the run's own store (it dies with the driver): the servers must not spend
    seconds retrying exports to it, nor drain requests nobody will read."""
    rows = [{"q": i, "fault": "hang"} for i in range(8)]
    job.write(
        {"a": fault_agent()},
        rows,
        agent="a",
        concurrency=8,
        timeout_s=600,
        telemetry={"preset": "default", "exporter": "auto"},
    )
    proc = job.start(telemetry=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (job.out / "logs" / "a.ready").exists(), timeout=120)
        assert wait_for(lambda: _progress(job).get("in_flight") == 8, timeout=120)
    finally:
        _kill_driver(proc)
    # Gone within seconds, whichever notices first: the server's own orphan watch (it logs
    # "the driver ... is gone") or the parent-death signal of the process that forked it; a
    # server draining its 8 hanging requests or retrying exports to the dead store for its
    # flush limit would still be alive.
    killed_at = time.monotonic()
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    assert time.monotonic() - killed_at < 15, (job.out / "logs" / "a.log").read_text()[-2000:]


def _progress(job: Job) -> dict[str, object]:
    try:
        return orjson.loads((job.out / "progress.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}


@pytest.mark.parametrize("seed", [1, 2])
def test_driver_killed_at_a_random_point_then_resumed_is_exact(
    job: Job, no_leftover_servers: None, seed: int
) -> None:
    rng = random.Random(seed)
    faults = ["ok"] * 6 + ["5xx_once", "429_once", "no_reward", "5xx"]
    rows = [{"q": i, "fault": rng.choice(faults)} for i in range(120)]
    job.write(
        {"a": fault_agent(delay_s=0.05, log_dir=str(job.root))},
        rows,
        agent="a",
        concurrency=8,
        max_attempts=3,
        repeats=2,
    )
    proc = job.start()
    try:
        target = rng.randint(5, 150)
        wait_for(lambda: job.line_count("rollouts.jsonl") >= target, timeout=120)
    finally:
        _kill_driver(proc)
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    resumed = job.run(timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_exact_accounting(job, 120, repeats=2)
    kinds = job.summary["failed_by_kind"]
    assert set(kinds) <= {"missing_reward", "http_5xx"}
    assert kinds.get("http_5xx", 0) == 2 * sum(1 for r in rows if r["fault"] == "5xx")
    assert kinds.get("missing_reward", 0) == 2 * sum(1 for r in rows if r["fault"] == "no_reward")


def test_traces_check_passes_on_a_run_resumed_after_kill_9(
    job: Job, no_leftover_servers: None
) -> None:
    """Rows whose traces died with the killed session are their own category, not violations."""
    job.write(
        {"a": fault_agent(delay_s=0.05)},
        [{"q": i} for i in range(200)],
        agent="a",
        concurrency=8,
        telemetry={"preset": "default", "exporter": "auto"},
    )
    proc = job.start(telemetry=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 40, timeout=120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_lines = job.line_count("rollouts.jsonl")
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    resumed = job.run(timeout=300, telemetry=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_exact_accounting(job, 200)
    check = subprocess.run(
        [*job.command()[:3], "traces", "check", str(job.out), "--json"],
        env=job.env(telemetry=True),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = orjson.loads(check.stdout)
    assert check.returncode == 0, report["violations"][:5]
    first_session_ids = {r["rollout_id"] for r in job.rollouts[:killed_lines]}
    for lost in report["lost_with_killed_process"]:
        assert lost["file"] == "rollouts.jsonl" and lost["rollout_id"] in first_session_ids
