"""SIGHUP (a closed terminal) and a double Ctrl-C end a run like one Ctrl-C: records whole,
summary and session ``interrupted``, the resume line printed, and the resume completes."""

from __future__ import annotations

import signal
import time

import pytest
from e2e_support import Job, agent, killed_if_left_running

from rollgym.session_records import read_sessions

pytestmark = pytest.mark.e2e

ROWS = 200


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGHUP,), (signal.SIGINT, signal.SIGINT)],
    ids=["sighup", "double-ctrl-c"],
)
def test_the_run_ends_like_one_ctrl_c(
    job: Job, no_leftover_servers: None, signals: tuple[int, ...]
) -> None:
    job.write({"a": agent(delay_s=0.2)}, [{"q": i} for i in range(ROWS)], agent="a", concurrency=8)
    proc = job.start()
    with killed_if_left_running(proc):
        job.wait_rollouts(16)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.02)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    resume = [line for line in output.splitlines() if "to resume:" in line]
    assert len(resume) == 1 and resume[0].startswith("rollgym: interrupted; to resume: rollgym run")
    assert job.summary["status"] == "interrupted"
    (session,) = read_sessions(job.out)
    assert session["status"] == "interrupted"
    for name in ("rollouts.jsonl", "failures.jsonl"):
        path = job.out / name
        assert not path.exists() or path.read_bytes().endswith(b"\n"), f"{name} torn"
    done = len(job.rollouts)
    assert 16 <= done < ROWS
    rerun = job.run()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    keys = sorted(r["task_index"] for r in job.rollouts)
    assert keys == list(range(ROWS)), "a rollout lost or written twice"
