"""A run over a verifiers environment survives ``kill -9`` of its driver: the environment
servers die with it, and so do their verifiers workers (where the rollouts live: counted from
outside, by process), and the resumed run is exact (nothing lost, nothing run twice)."""

from __future__ import annotations

import signal

import pytest
from e2e_support import Job, server_pids_alive, wait_for
from faults_support import assert_exact_accounting
from verifiers_support import VerifiersJob, require_verifiers, verifiers_env

from server_specs import simulated_model

require_verifiers()

pytestmark = pytest.mark.e2e

ROWS = 80
#: What a verifiers worker's command line holds.
WORKER = "verifiers_worker.py"


def test_kill_9_and_resume_over_a_verifiers_environment(
    job: Job, no_leftover_servers: None
) -> None:
    vf_job = VerifiersJob(job.root)
    vf_job.write(
        {
            "policy": simulated_model(0.3),
            "sums": verifiers_env("verifiers_arith", verifiers_args={"n": ROWS}),
            "capitals": verifiers_env("verifiers_capitals"),
        },
        [
            {
                "task_id": {
                    "taskset": "capitals" if i % 2 else "sums",
                    "task_id": i % 4 if i % 2 else i,
                }
            }
            for i in range(ROWS)
        ],
        environment_routes={"sums": "sums", "capitals": "capitals"},
        concurrency=8,
    )
    proc = vf_job.start()
    try:
        # killed with rollouts in flight
        assert wait_for(lambda: vf_job.line_count("rollouts.jsonl") >= 20, timeout=120)
        # one worker per verifiers environment, playing the rollouts in flight
        assert len(server_pids_alive(WORKER, under=str(job.root))) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert vf_job.line_count("rollouts.jsonl") < ROWS
    # the environment servers died with the driver: no verifiers rollout outlives it
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    assert wait_for(lambda: not server_pids_alive(WORKER, under=str(job.root)), timeout=60)

    resumed = vf_job.run(timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert_exact_accounting(vf_job, ROWS)
    assert vf_job.summary["failed"] == 0
    assert all(r["reward"] == 1.0 for r in vf_job.rollouts)
    assert wait_for(lambda: not server_pids_alive(WORKER, under=str(job.root)), timeout=60)
