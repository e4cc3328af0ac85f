"""``rollgym traces check`` on runs that were interrupted, killed, or lost a server process.

Real servers on loopback (the built-in simulated model, arithmetic environment and
single-turn agent, so every rollout crosses three processes), the real driver, the run's own
trace store. Each run must keep exact accounting and pass the check, with what the dead
processes cut short counted apart; the check's strictness on planted leaks is in
``tests/unit/reading/test_check_history.py``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from typing import Any

import orjson
import pytest
from e2e_support import Job, killed_if_left_running, server_pids_alive, wait_for
from faults_support import assert_exact_accounting

from server_specs import solver_servers

pytestmark = pytest.mark.e2e

ROWS = 150
TELEMETRY = {"preset": "default", "exporter": "auto"}


def _write(job: Job, **servers: Any) -> None:
    model = {
        "kind": "model",
        "impl": "simulated",
        "latency": {"kind": "lognormal", "seconds": 0.15, "sigma": 0.3},
    }
    config = solver_servers(model=model, **servers)
    rows = [{"question": f"{i} + {i % 7}"} for i in range(ROWS)]
    job.write(config, rows, agent="solver", concurrency=16, max_attempts=3, telemetry=TELEMETRY)


def _start(job: Job) -> subprocess.Popen[str]:
    return job.start(telemetry=True)


def _check(job: Job) -> tuple[int, dict[str, Any], str]:
    """``rollgym traces check`` as a user runs it: exit status, ``--json`` report, text."""
    command = [*job.command()[:3], "traces", "check", str(job.out)]
    env = job.env(telemetry=True)
    as_json = subprocess.run([*command, "--json"], env=env, capture_output=True, timeout=180)
    text = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert as_json.returncode == text.returncode
    return as_json.returncode, orjson.loads(as_json.stdout), text.stdout


def _incarnations(job: Job, instance: str) -> list[dict[str, Any]]:
    lines = (job.out / "servers.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r["instance"] == instance]


def _pid_of(job: Job, instance: str) -> int:
    (pid,) = [r["pid"] for r in _incarnations(job, instance) if r["event"] == "start"][-1:]
    return int(pid)


def _resume(job: Job) -> None:
    resumed = job.run(timeout=400, telemetry=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def test_ctrl_c_then_resume_passes_the_check(job: Job, no_leftover_servers: None) -> None:
    _write(job)
    proc = _start(job)
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 30, timeout=180)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert proc.returncode == 130
    cancelled = {f["rollout_id"] for f in job.failures if f["error_kind"] == "cancelled"}
    assert cancelled, "Ctrl-C cancelled nothing in flight"
    _resume(job)
    assert_exact_accounting(job, ROWS)
    code, report, text = _check(job)
    assert code == 0, report["violations"][:5]
    assert report["history"]["sessions"] == [
        {"index": 0, "status": "interrupted"},
        {"index": 1, "status": "completed"},
    ]
    assert "sessions: 0 interrupted, 1 completed" in text and "OK" in text
    # the cancelled rollouts ran again under their ids: one dispatch in each session
    with sqlite3.connect(job.out / "traces.db") as conn:
        twice = {
            rollout_id
            for (rollout_id,) in conn.execute(
                "SELECT rollout_id FROM dispatches GROUP BY rollout_id HAVING COUNT(*) = 2"
            )
        }
        sessions = dict(
            conn.execute(
                "SELECT json_extract(attributes, '$.\"gym.run.session\"'), COUNT(*) FROM spans "
                "WHERE name = 'gym.rollout.dispatch' GROUP BY 1"
            ).fetchall()
        )
    assert cancelled <= twice
    assert set(sessions) == {0, 1}
    # the output lines name the session that wrote them; re-run rollouts are session 1's
    written = {r["rollout_id"]: r["session"] for r in job.rollouts}
    assert {written[rollout_id] for rollout_id in cancelled} == {1}


def test_kill_9_twice_then_resume_passes_the_check(job: Job, no_leftover_servers: None) -> None:
    _write(job)
    for _ in range(2):
        before = job.line_count("rollouts.jsonl")
        proc = _start(job)
        with killed_if_left_running(proc):
            target = before + 25
            assert wait_for(
                lambda target=target: job.line_count("rollouts.jsonl") >= target, timeout=180
            )
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    _resume(job)
    assert_exact_accounting(job, ROWS)
    code, report, text = _check(job)
    assert code == 0, report["violations"][:5]
    assert [s["status"] for s in report["history"]["sessions"]] == ["killed", "killed", "completed"]
    assert "sessions: 0 killed, 1 killed, 2 completed" in text
    # whatever the kills cut short is counted under a killed session, never elsewhere
    assert set(report["cut_short"]) <= {"session 0 (killed)", "session 1 (killed)"}


def _kill_mid_run(job: Job, instance: str) -> str:
    proc = _start(job)
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 30, timeout=180)
        os.kill(_pid_of(job, instance), signal.SIGKILL)
        out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    return out


def test_an_agent_replica_killed_mid_run_passes_the_check(
    job: Job, no_leftover_servers: None
) -> None:
    _write(job, solver={"replicas": 2})
    out = _kill_mid_run(job, "solver@1")
    assert "server 'solver@1' died (killed by SIGKILL" in out
    assert_exact_accounting(job, ROWS)
    # its death is recorded; its restart (a new incarnation) when it came before the run ended
    events = [r["event"] for r in _incarnations(job, "solver@1")]
    assert events in (["start", "died"], ["start", "died", "start"])
    code, report, text = _check(job)
    assert code == 0, report["violations"][:5]
    (death,) = report["history"]["server_deaths"]
    assert death["process"].startswith("solver@1 pid ") and "SIGKILL" in death["exit"]
    assert "server processes that died mid-run: solver@1 pid" in text
    assert all(label.startswith("solver@1 pid ") for label in report["cut_short"])


def test_the_model_server_killed_mid_run_passes_the_check(
    job: Job, no_leftover_servers: None
) -> None:
    _write(job)
    out = _kill_mid_run(job, "policy")
    assert "server 'policy' died (killed by SIGKILL" in out
    assert_exact_accounting(job, ROWS)
    code, report, text = _check(job)
    assert code == 0, report["violations"][:5]
    (death,) = report["history"]["server_deaths"]
    assert death["process"].startswith("policy pid ")
    assert all(label.startswith("policy pid ") for label in report["cut_short"])
