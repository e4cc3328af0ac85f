"""A mix of agent and environment faults in one run: every rollout lands where it should.

Rows pick their fault (see ``fault_parts``); the expected record of each is known in advance,
so the test checks not only the totals but each rollout's kind and attempt count.
"""

from __future__ import annotations

import os
import signal

import orjson
import pytest
from e2e_support import Job, killed_if_left_running, live_server_pid, wait_for
from faults_support import assert_exact_accounting

pytestmark = pytest.mark.e2e

#: fault -> (recorded as, attempt of the record) with max_attempts=3
EXPECTED = {
    "ok": ("ok", 0),
    "5xx_once": ("ok", 1),
    "429_once": ("ok", 1),
    "env_5xx_once": ("ok", 1),
    "5xx": ("http_5xx", 2),
    "no_reward": ("missing_reward", 0),
    "hang": ("timeout", 2),
}


def _servers(**agent_options: object) -> dict[str, object]:
    return {
        "env": {"kind": "environment", "impl": "fault_parts:FaultEnv"},
        "a": {
            "kind": "agent",
            "impl": "fault_parts:FaultAgent",
            "environment": "env",
            **agent_options,
        },
    }


def test_a_mix_of_faults_is_recorded_rollout_by_rollout(
    job: Job, no_leftover_servers: None
) -> None:
    faults = list(EXPECTED)
    rows = [{"q": i, "fault": faults[i % len(faults)]} for i in range(70)]
    lines = [orjson_line(row) for row in rows] + ['{"q": ', "[1, 2]"]  # and two bad lines
    # 6 s per attempt: the hang rows time out all the same (3 x 6 s, side by side), and no
    # quick rollout on a loaded machine comes near it (2 s was a window one could miss)
    job.write(_servers(), None, agent="a", concurrency=16, max_attempts=3, timeout_s=6)
    job.write_rows(lines)
    proc = job.run(timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_exact_accounting(job, len(lines))
    got = {r["task_index"]: ("ok", r["attempt"]) for r in job.rollouts}
    got.update({f["task_index"]: (f["error_kind"], f["attempt"]) for f in job.failures})
    for index, row in enumerate(rows):
        assert got[index] == EXPECTED[row["fault"]], (index, row)
    assert got[70] == ("invalid_row", 0) and got[71] == ("invalid_row", 0)
    served = (job.root / "a.served").read_text().split() if (job.root / "a.served").exists() else []
    assert len(served) == len(set(served)), "an attempt ran twice"


def orjson_line(row: dict[str, object]) -> str:
    return orjson.dumps(row).decode()


def test_an_environment_killed_mid_run_is_restarted_and_nothing_is_lost(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [{"q": i} for i in range(80)]
    job.write(_servers(delay_s=0.05), rows, agent="a", concurrency=4, max_attempts=3)
    proc = job.start()
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 10, timeout=120)
        env_pid = _pid_of(job, "env")
        os.kill(env_pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "server 'env' died (killed by SIGKILL (exit status -9))" in out
    assert_exact_accounting(job, 80)
    assert job.summary["failed"] == 0
    assert job.summary["servers"]["env"]["restarts"] == 1


def _pid_of(job: Job, name: str) -> int:
    """The pid of launched server ``name`` of this job (from the run's servers.jsonl)."""
    pid = live_server_pid(job.out, name)
    if pid is None:
        raise AssertionError(f"no live server {name!r}")
    return pid
