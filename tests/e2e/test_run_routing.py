"""Routing of both kinds and identity stamping, through the real CLI and real servers."""

from __future__ import annotations

import pytest
from e2e_support import Job, agent

from server_specs import quickstart_servers

pytestmark = pytest.mark.e2e


def test_agent_rows_are_stamped_and_recorded(job: Job, no_leftover_servers: None) -> None:
    rows = [
        {"q": 0},
        {"q": 1, "agent": "second"},
        {"q": 2, "rollout_id": "custom"},
        {"q": 3, "score": 0.0},
    ]
    job.write({"first": agent(), "second": agent()}, rows, agent="first", repeats=2, concurrency=4)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_id = {r["rollout_id"]: r for r in job.rollouts}
    assert sorted(by_id) == ["0-0", "0-1", "1-0", "1-1", "3-0", "3-1", "custom", "custom-r1"]
    assert by_id["1-1"]["dispatch_name"] == "second" and by_id["0-0"]["dispatch_name"] == "first"
    echoed = by_id["custom-r1"]["result"]["row"]
    assert (echoed["task_index"], echoed["rollout_index"], echoed["attempt"]) == (2, 1, 0)
    for record in job.rollouts:
        assert {
            "rollout_id",
            "task_index",
            "rollout_index",
            "attempt",
            "dispatch_name",
            "reward",
            "duration_s",
            "trace_id",
            "result",
            "started_at",
            "finished_at",
        } <= set(record)
    summary = job.summary
    assert summary["status"] == "completed"
    assert summary["requested"] == summary["completed"] + summary["failed"] == 8
    first = summary["by_dispatch_name"]["first"]
    assert first["completed"] == 6 and first["mean_reward"] == pytest.approx(4 / 6)
    assert first["pass_at_k"]["1"] == pytest.approx(2 / 3) and first["pass_at_k"][
        "2"
    ] == pytest.approx(2 / 3)
    assert (job.out / "config.yaml").exists() and (job.out / "progress.json").exists()
    assert "results:" in proc.stdout and "first" in proc.stdout


def test_episode_rows_go_to_the_environment(job: Job, no_leftover_servers: None) -> None:
    servers = quickstart_servers(arith={"model": "policy"}, keys=None, walker=None)
    rows = [
        {"task_id": {"taskset": "math", "task_id": 1}, "question": "2 + 3"},
        {"question": "4 * 5"},
    ]
    job.write(servers, rows, agent="solver", environment_routes={"math": "arith"})
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_id = {r["rollout_id"]: r for r in job.rollouts}
    assert by_id["0-0"]["dispatch_name"] == "arith"
    assert by_id["1-0"]["dispatch_name"] == "solver"
    assert by_id["0-0"]["reward"] == 1.0 and by_id["1-0"]["reward"] == 1.0
    assert "arith" in job.summary["environments"]


def test_trace_ids_and_span_counts_with_the_local_trace_store(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": 0}, {"q": 1}], agent="a")
    proc = job.run("telemetry.preset=default", "telemetry.exporter=auto", telemetry=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace_ids = [r["trace_id"] for r in job.rollouts]
    assert len(trace_ids) == 2 and len(set(trace_ids)) == 2
    assert all(len(t) == 32 and int(t, 16) >= 0 and t == t.lower() for t in trace_ids)
    assert (job.out / "traces.db").exists()
    assert job.summary["telemetry"]["spans_exported"] > 0
