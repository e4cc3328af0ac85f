"""Resume after kill -9 of the driver, and Ctrl-C: nothing lost, nothing twice, no orphans."""

from __future__ import annotations

import signal

import pytest
from e2e_support import Job, agent, children_of, killed_if_left_running, server_pids_alive, wait_for

pytestmark = pytest.mark.e2e

ROWS = 240


def _slow_job(job: Job) -> None:
    job.write({"a": agent(delay_s=0.1)}, [{"q": i} for i in range(ROWS)], agent="a", concurrency=8)


def _every_rollout_exactly_once(job: Job) -> None:
    keys = [(r["task_index"], r["rollout_index"]) for r in job.rollouts]
    assert len(keys) == len(set(keys)), "a rollout was written twice"
    assert sorted(keys) == [(i, 0) for i in range(ROWS)]
    assert job.failures == []
    summary = job.summary
    assert summary["status"] == "completed"
    assert summary["requested"] == summary["completed"] == ROWS and summary["failed"] == 0


def test_resume_after_kill_9(job: Job, no_leftover_servers: None) -> None:
    _slow_job(job)
    proc = job.start()
    with killed_if_left_running(proc):
        job.wait_rollouts(40)
        servers = set(server_pids_alive(under=str(job.root)))
        assert servers, "the launcher started no server process"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    first_session = job.line_count("rollouts.jsonl")
    assert first_session < ROWS
    assert wait_for(lambda: not (servers & set(server_pids_alive())), timeout=15), "orphan servers"
    run_id = (job.out / "run.json").read_text()
    rerun = job.run()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    _every_rollout_exactly_once(job)
    assert (job.out / "run.json").read_text() == run_id  # the run keeps its id across resumes


def test_ctrl_c_records_cancelled_then_resume_completes(
    job: Job, no_leftover_servers: None
) -> None:
    _slow_job(job)
    proc = job.start()
    with killed_if_left_running(proc):
        job.wait_rollouts(40)
        servers = children_of(proc.pid)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert servers and not (set(servers) & set(server_pids_alive())), "Ctrl-C left a server behind"
    summary = job.summary
    assert summary["status"] == "interrupted"
    assert summary["requested"] == summary["completed"] + summary["failed"]
    assert summary["completed"] == len(job.rollouts) and summary["failed"] == len(job.failures)
    assert summary["failed_by_kind"].get("cancelled", 0) >= 1
    assert {f["error_kind"] for f in job.failures} == {"cancelled"}
    rerun = job.run()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    _every_rollout_exactly_once(job)


def test_resume_refuses_a_different_repeats(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    assert job.run().returncode == 0
    proc = job.run("run.repeats=2")
    assert proc.returncode == 2 and "run.repeats" in proc.stderr
