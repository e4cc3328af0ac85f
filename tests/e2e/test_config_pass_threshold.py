"""``pass_threshold`` means one thing in a job: the run's pass@k and an environment's
``pass_rate`` count the same rollouts as passed, through the real CLI and real servers."""

from __future__ import annotations

import pytest
from e2e_support import Job

from server_specs import simulated_model, solver_servers

pytestmark = pytest.mark.e2e

ROWS = [{"question": f"{n} + 1"} for n in range(4)]


def test_the_environments_pass_rate_follows_run_pass_threshold(
    job: Job, no_leftover_servers: None
) -> None:
    # an always-wrong model: every reward is 0, which passes at a threshold of 0 only
    job.write(solver_servers(model=simulated_model(accuracy=0.0)), ROWS, agent="solver")
    proc = job.run("run.pass_threshold=0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = job.summary
    assert summary["by_dispatch_name"]["solver"]["mean_reward"] == 0.0
    assert summary["by_dispatch_name"]["solver"]["pass_at_k"]["1"] == 1.0
    assert summary["environments"]["arith"]["pass_rate"] == 1.0


def test_an_environment_that_sets_its_own_keeps_it(job: Job, no_leftover_servers: None) -> None:
    servers = solver_servers(model=simulated_model(accuracy=0.0), arith={"pass_threshold": 1.0})
    job.write(servers, ROWS, agent="solver", pass_threshold=0)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert job.summary["by_dispatch_name"]["solver"]["pass_at_k"]["1"] == 1.0
    assert job.summary["environments"]["arith"]["pass_rate"] == 0.0
