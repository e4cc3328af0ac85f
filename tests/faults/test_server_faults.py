"""Launched servers dying: during the run (reported, restarted, counted) and during start-up."""

from __future__ import annotations

import os
import signal

import pytest
from e2e_support import Job, killed_if_left_running, live_server_pid, server_pids_alive, wait_for
from faults_support import assert_exact_accounting, fault_agent

pytestmark = pytest.mark.e2e


def test_an_agent_killed_mid_run_is_reported_restarted_and_counted(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [{"q": i} for i in range(60)]
    job.write({"a": fault_agent(delay_s=0.1)}, rows, agent="a", concurrency=4, max_attempts=3)
    proc = job.start()
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 5, timeout=120)
        (pid,) = server_pids_alive(under=str(job.root))
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert "server 'a' died (killed by SIGKILL (exit status -9))" in out
    assert "restarting server 'a' (restart 1 of 3, servers.a.restart)" in out
    assert "server 'a' is back at http://127.0.0.1:" in out
    assert "server restarts: a: 1" in out
    # Rollouts in flight when it died were retried once it was back: none lost, none failed.
    assert_exact_accounting(job, 60)
    assert job.summary["failed"] == 0
    assert job.summary["servers"]["a"] == {"deaths": 1, "restarts": 1, "down": False}


def test_a_server_with_no_restart_left_fails_its_rollouts_at_once(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [{"q": i, "fault": "die_once" if i == 3 else "ok"} for i in range(20)]
    job.write({"a": fault_agent(restart=0)}, rows, agent="a", concurrency=2, max_attempts=3)
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "server 'a' died (exit status 9)" in proc.stderr
    assert "server 'a' is down: it died (exit status 9) and was not restarted" in proc.stderr
    assert "servers.a.restart: 0" in proc.stderr
    assert_exact_accounting(job, 20)
    summary = job.summary
    assert summary["servers"]["a"] == {"deaths": 1, "restarts": 0, "down": True}
    assert summary["failed_by_kind"].get("server_down", 0) >= 1
    assert set(summary["failed_by_kind"]) <= {"server_down", "connection_error"}
    assert any("is down" in warning for warning in summary["warnings"])
    assert "warning: server 'a' is down" in " ".join(proc.stdout.split())
    down = [f for f in job.failures if f["error_kind"] == "server_down"]
    assert all(f["attempt"] == 0 or "is down" in f["message"] for f in down)


def test_a_server_dying_during_start_up_stops_the_run_before_its_dependents_serve(
    job: Job, no_leftover_servers: None
) -> None:
    servers = {
        "env": {"kind": "environment", "impl": "fault_parts:FaultEnv", "die_after_start_s": 1.0},
        # 'a' cannot be healthy before 'env' has died, however fast the machine.
        "a": fault_agent(environment="env", start_delay_s=5.0),
    }
    job.write(servers, [{"q": i} for i in range(10)], agent="a")
    proc = job.run(timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # It dies while 'a' starts; on a very slow machine, before it was even healthy.
    assert "server 'env': exited (exit status 7)" in proc.stderr
    assert "during the launch, after it was healthy" in proc.stderr or "before it was healthy" in (
        proc.stderr
    )
    assert "last lines of" in proc.stderr or "is empty" in proc.stderr
    assert job.rollouts == [] and job.failures == []


def _replica_pid(job: Job, replica: int) -> int:
    """The PID of replica ``replica`` of the job's one server (from the run's servers.jsonl)."""
    pid = live_server_pid(job.out, f"a@{replica}" if replica else "a")
    if pid is None:
        raise AssertionError(f"no live process for replica {replica}")
    return pid


def _restarted(job: Job, killed: int) -> bool:
    """Whether replica 1 runs again, in a new process."""
    try:
        return _replica_pid(job, 1) != killed
    except AssertionError:
        return False


def test_a_replica_killed_mid_run_leaves_rotation_and_is_replaced(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [{"q": i} for i in range(80)]
    # Rollouts wait in the agents while the hold file exists: the run cannot end before the
    # killed replica is back, however slowly it restarts on a busy machine.
    hold = job.root / "hold"
    job.root.mkdir(parents=True, exist_ok=True)
    hold.touch()
    agent = fault_agent(delay_s=0.1, replicas=2, hold_file=str(hold))
    job.write({"a": agent}, rows, agent="a", concurrency=4)
    proc = job.start()
    with killed_if_left_running(proc):
        # progress.json: every replica is healthy and rollouts are being dispatched
        assert wait_for(lambda: (job.out / "progress.json").exists(), timeout=120)
        killed = _replica_pid(job, 1)
        os.kill(killed, signal.SIGKILL)
        ready = job.out / "logs" / "a@1.ready"
        assert wait_for(lambda: _restarted(job, killed) and ready.exists(), timeout=120)
        hold.unlink()
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert "server 'a@1' died (killed by SIGKILL (exit status -9))" in out
    assert "server 'a@1' is back at http://127.0.0.1:" in out
    # its rollouts failed as transient and were retried on the other replica: none lost
    assert_exact_accounting(job, 80)
    assert job.summary["failed"] == 0
    replicas = job.summary["servers"]["a"]["replicas"]
    assert replicas["a@1"] == {"deaths": 1, "restarts": 1, "down": False}
    assert replicas["a"] == {"deaths": 0, "restarts": 0, "down": False}
    # the server's own entry adds its replicas up
    assert {k: v for k, v in job.summary["servers"]["a"].items() if k != "replicas"} == {
        "deaths": 1,
        "restarts": 1,
        "down": False,
    }
    # the final table names the replica that was restarted
    assert "server restarts: a: 1 (a@1: 1)" in out
