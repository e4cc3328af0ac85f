"""A server that stops answering (SIGSTOP: alive, its port open, nothing read or written).

The driver holds connections to it that will never see an answer. That must cost only the
rollouts sent there: each times out after ``run.timeout_s`` and is retried (on the other
replica), while every other rollout goes on as before, not frozen behind the stopped one.

Between replicas of one server the silent replica leaves the rotation; between two different
servers the silent one's attempts stop counting against ``run.concurrency`` and its new rows are
held back unsent (``rollgym.driver.stall_relief``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

import pytest
from e2e_support import Job, killed_if_left_running, live_server_pid, wait_for
from faults_support import assert_exact_accounting, fault_agent

pytestmark = pytest.mark.e2e

ROWS = 300
#: Long enough that the run would still be waiting on the stopped replica if it froze.
TIMEOUT_S = 30.0


def run_with_one_stopped(
    job: Job, instance: str, goes_on_to: Callable[[int], int], *, resume: bool
) -> None:
    """Run ``job``; once 20 rollouts are in, SIGSTOP server ``instance`` and require the run
    to reach ``goes_on_to(rollouts at the stop)`` rollouts well before any rollout sent there
    could time out (the run is not frozen). With ``resume`` the server is continued then,
    else once the run has ended. The run must end cleanly."""
    proc = job.start()
    stopped: int | None = None
    try:
        with killed_if_left_running(proc):
            assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 20, timeout=120)
            stopped = live_server_pid(job.out, instance)
            assert stopped is not None
            os.kill(stopped, signal.SIGSTOP)
            at_stop = job.line_count("rollouts.jsonl")
            went_on = wait_for(
                lambda: job.line_count("rollouts.jsonl") >= goes_on_to(at_stop),
                timeout=TIMEOUT_S * 0.8,
            )
            done_while_stopped = job.line_count("rollouts.jsonl") - at_stop
            if resume:
                os.kill(stopped, signal.SIGCONT)
            assert went_on, (
                f"only {done_while_stopped} rollout(s) completed while {instance} was stopped"
            )
            out, _ = proc.communicate(timeout=TIMEOUT_S * 4 + 120)
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):  # the driver's stop killed it
                os.kill(stopped, signal.SIGCONT)
    assert proc.returncode == 0, out


def test_a_stopped_replica_delays_only_its_own_rollouts(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [{"q": i} for i in range(ROWS)]
    job.write(
        {"a": fault_agent(delay_s=0.02, replicas=2)},
        rows,
        agent="a",
        concurrency=8,
        timeout_s=TIMEOUT_S,
        max_attempts=3,
    )
    # the other replica keeps completing rollouts while a@1 is stopped
    run_with_one_stopped(job, "a@1", lambda at_stop: min(ROWS - 8, at_stop + 100), resume=False)
    # what was sent to the stopped replica timed out once and was retried on the other (not
    # sent back to it): none lost, none failed, no rollout needed a third attempt
    assert_exact_accounting(job, ROWS)
    assert job.summary["failed"] == 0
    assert max(r["attempt"] for r in job.rollouts) == 1


def test_a_stopped_agent_does_not_freeze_the_rollouts_of_another(
    job: Job, no_leftover_servers: None
) -> None:
    """Two agent servers, rows alternating between them; ``b`` is stopped. ``a``'s rollouts
    keep completing while ``b``'s wait out their time limit."""
    rows = [{"q": i, "agent": "a" if i % 2 else "b"} for i in range(ROWS)]
    job.write(
        {"a": fault_agent(delay_s=0.02), "b": fault_agent(delay_s=0.02)},
        rows,
        agent="a",
        concurrency=8,
        timeout_s=TIMEOUT_S,
        max_attempts=3,
    )
    run_with_one_stopped(job, "b", lambda at_stop: at_stop + 100, resume=True)
    assert_exact_accounting(job, ROWS)
