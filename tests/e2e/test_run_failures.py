"""Retries, exhausted retries, agents without rewards, an agent that dies: exact accounting."""

from __future__ import annotations

import orjson
import pytest
from e2e_support import Job, agent

pytestmark = pytest.mark.e2e


def _accounting_holds(job: Job, expected_requested: int) -> None:
    summary = job.summary
    assert summary["requested"] == summary["completed"] + summary["failed"] == expected_requested
    assert summary["completed"] == len(job.rollouts)
    assert summary["failed"] == len(job.failures)
    keys = [(r["task_index"], r["rollout_index"]) for r in job.rollouts + job.failures]
    assert len(keys) == len(set(keys)), "a rollout was recorded twice"


def test_retry_then_success_and_retry_exhausted(job: Job, no_leftover_servers: None) -> None:
    servers = {
        "flaky": agent("agents:FailFirstAttemptAgent"),
        "broken": agent("agents:AlwaysFailAgent"),
    }
    rows = [{"q": 0}, {"q": 1, "agent": "broken"}, {"q": 2, "rollout_id": "mine"}]
    job.write(servers, rows, agent="flaky", max_attempts=3)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_id = {r["rollout_id"]: r for r in job.rollouts}
    assert sorted(by_id) == ["0-0-a1", "mine-a1"]
    assert by_id["0-0-a1"]["attempt"] == 1 and by_id["0-0-a1"]["result"]["attempt_seen"] == 1
    (failure,) = job.failures
    assert (failure["rollout_id"], failure["attempt"], failure["error_kind"]) == (
        "1-0-a2",
        2,
        "http_5xx",
    )
    assert failure["dispatch_name"] == "broken" and failure["line"] == 2
    assert "this agent always fails" in failure["message"]
    assert "reward" not in failure
    _accounting_holds(job, 3)
    assert job.summary["failed_by_kind"] == {"http_5xx": 1}


def test_agent_without_numeric_reward_is_a_permanent_failure(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent("agents:NoRewardAgent")}, [{"q": 0}, {"q": 1}], agent="a", max_attempts=3)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert job.rollouts == []
    assert {(f["rollout_id"], f["attempt"], f["error_kind"]) for f in job.failures} == {
        ("0-0", 0, "missing_reward"),
        ("1-0", 0, "missing_reward"),
    }
    assert "'reward'" in job.failures[0]["message"]
    _accounting_holds(job, 2)


def test_agent_killed_mid_run_keeps_exact_accounting(job: Job, no_leftover_servers: None) -> None:
    job.write(
        {"a": agent("agents:DyingAgent", die_after=10, restart=0)},
        [{"q": i} for i in range(40)],
        agent="a",
        concurrency=4,
        max_attempts=2,
    )
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _accounting_holds(job, 40)
    assert 1 <= len(job.rollouts) <= 10  # requests in flight when it died are lost with it
    kinds = {f["error_kind"] for f in job.failures}
    assert kinds <= {"connection_error", "http_5xx", "server_down"} and kinds
    assert all(isinstance(r["reward"], float) for r in job.rollouts)


def test_oversized_request_is_a_permanent_failure(job: Job, no_leftover_servers: None) -> None:
    """The driver holds itself to the servers' limit: the row is refused before it is sent
    (a launched server would answer it 413: ``test_servers.py`` and
    ``tests/unit/servers/test_http_server.py`` cover that edge)."""
    rows = [{"q": 0}, {"q": 1, "blob": "x" * 5000}, {"q": 2}]
    job.write({"a": agent()}, rows, agent="a", max_request_bytes=2048)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (failure,) = job.failures
    assert failure["rollout_id"] == "1-0" and failure["error_kind"] == "request_too_large"
    assert failure["attempt"] == 0 and "run.max_request_bytes" in failure["message"]
    assert "2048" in failure["message"]
    assert sorted(r["rollout_id"] for r in job.rollouts) == ["0-0", "2-0"]
    _accounting_holds(job, 3)


def test_rollouts_slower_than_half_the_time_limit_say_the_window_closed(
    job: Job, no_leftover_servers: None
) -> None:
    """A window closed by slow answers would only look like a slow run: it is said once, on
    the console, with what to change, and each window is in progress.json."""
    job.write(
        {"a": agent("agents:EchoAgent", delay_s=1.2)},
        [{"q": i} for i in range(64)],
        agent="a",
        concurrency=48,
        timeout_s=2.0,  # each answer takes 1.2 s: over half of it
        max_attempts=1,
    )
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _accounting_holds(job, 64)
    said = [line for line in proc.stderr.splitlines() if "dispatch window is halved" in line]
    assert len(said) == 1, proc.stderr
    assert said[0].startswith("dispatch to 'a': an attempt ")
    assert "run.timeout_s (2 s)" in said[0] and "run.adaptive_window: false" in said[0]
    assert job.summary["warnings"] == [said[0]]  # and in summary.json, as the run's warning
    progress = orjson.loads((job.out / "progress.json").read_bytes())
    windows = progress["dispatch_windows"]
    assert set(windows) == {"a"} and windows["a"]["window"] < 48
    assert windows["a"]["sent"] == windows["a"]["waiting"] == 0
