"""Environments written with verifiers run unchanged through ``rollgym run`` (``impl: verifiers``).

Real ``vf.SingleTurnEnv``, ``vf.ToolEnv`` and ``vf.MultiTurnEnv`` environments (``verifiers_envs/``, written with the
verifiers package as its users write them) play their own rollouts against rollgym's
simulated model, which reads the tools the ToolEnv offers: every model call goes through
rollgym's model server (rollout-attributed, traced, token-captured), the rubric's reward and
its metrics come back, ``rollgym traces check`` exits 0, and 1,000 rollouts in flight over one
verifiers environment complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from verifiers_support import (
    TracedVerifiersJob,
    VerifiersJob,
    require_verifiers,
    routed,
    verifiers_env,
)

from rollgym.telemetry import names
from server_specs import simulated_model

require_verifiers()

pytestmark = pytest.mark.e2e

SUMS, CAPITALS, CHAINS = 10, 4, 3


def servers(latency_s: float = 0.0) -> dict[str, Any]:
    return {
        "policy": simulated_model(latency_s),
        "sums": verifiers_env("verifiers_arith", verifiers_args={"n": 50}),
        "capitals": verifiers_env("verifiers_capitals:load_environment"),
        "chain": verifiers_env("verifiers_chain", verifiers_args={"rounds": 3}),
    }


ROUTES = {"environment_routes": {"sums": "sums", "capitals": "capitals", "chain": "chain"}}


def rows() -> list[dict[str, Any]]:
    inline = {"task_id": {"taskset": "sums", "task_id": "inline"}}
    return [
        *routed("sums", SUMS),
        *routed("capitals", CAPITALS),
        *routed("chain", CHAINS),
        {**inline, "prompt": "Compute: 40 + 2", "answer": "42"},
    ]


def assert_played(records: list[dict[str, Any]]) -> None:
    by_env: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_env.setdefault(record["dispatch_name"], []).append(record)
    assert len(by_env["sums"]) == SUMS + 1 and len(by_env["capitals"]) == CAPITALS
    for record in by_env["sums"]:
        result = record["result"]
        # the simulated model computed the sum; the rubric's own functions scored it
        assert record["reward"] == 1.0 and result["answer"].startswith("Answer: "), result
        assert result["details"]["metrics"] == {"correct": 1.0, "replied": 1.0, "num_turns": 1.0}
        assert result["tool_calls"] == 0 and record["usage"]["model_calls"] == 1
    for record in by_env["capitals"]:
        result = record["result"]
        # the simulated model called the tool the ToolEnv offers, then answered its output
        assert record["reward"] == 1.0 and result["tool_calls"] == 1, result
        metrics = result["details"]["metrics"]
        assert metrics["lookup_capital_calls"] == 1.0 and metrics["named_capital"] == 1.0
        assert result["details"]["stop_condition"] == "no_tools_called"
        assert record["usage"]["model_calls"] == 2
    for record in by_env["chain"]:
        result = record["result"]
        # three sums, each asked by the environment's env_response after the model's answer
        assert record["reward"] == 1.0 and record["usage"]["model_calls"] == 3, result
        assert result["details"]["stop_condition"] == "has_final_env_response"


def test_a_single_turn_env_and_a_tool_env_play_end_to_end(tmp_path: Path) -> None:
    job = VerifiersJob(tmp_path)
    job.write(servers(), rows(), **ROUTES)
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert job.summary["failed"] == 0, job.failures
    assert_played(job.rollouts)


def test_a_verifiers_rollout_is_traced_and_the_traces_check(tmp_path: Path) -> None:
    """One bounded trace per rollout: a ``gym.model.chat`` per model call (through rollgym's
    model server), ``gym.env.seed_session`` for verifiers' ``setup_state``, a ``gym.env.tool``
    per ToolEnv tool call named by the tool, ``gym.verify`` with the rubric's reward and each
    reward function and metric as an evaluation; token-captured trajectories."""
    job = TracedVerifiersJob(tmp_path)
    job.write(servers(), rows(), **ROUTES, trajectories=True, capture_tokens=True)
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_played(job.rollouts)
    spans = job.spans()
    ids = {r["rollout_id"] for r in job.rollouts}
    tool_ids = {r["rollout_id"] for r in job.rollouts if r["dispatch_name"] == "capitals"}
    for name in (names.SPAN_MODEL_CHAT, names.SPAN_ENV_SEED, names.SPAN_VERIFY):
        assert {s.rollout_id for s in spans.named(name)} == ids, name
    chain_ids = {r["rollout_id"] for r in job.rollouts if r["dispatch_name"] == "chain"}
    tools = spans.named(names.SPAN_ENV_TOOL)
    assert {s.rollout_id for s in tools} == tool_ids | chain_ids
    named = {s.rollout_id: s.attributes[names.ENV_TOOL_NAME] for s in tools}
    assert {named[i] for i in tool_ids} == {"lookup_capital"}
    assert {named[i] for i in chain_ids} == {"env_response"}
    assert len([s for s in tools if s.rollout_id in chain_ids]) == 3 * CHAINS
    for verify in spans.named(names.SPAN_VERIFY):
        assert verify.attributes[names.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    lines = job.records("trajectories.jsonl")
    assert {t["rollout_id"] for t in lines} == ids
    for line in lines:
        trajectory = line["trajectory"]
        assert trajectory["capture"] == "tokens"
        kinds = [t["type"] for t in trajectory["turns"]]
        if line["rollout_id"] in tool_ids:
            assert kinds == ["model", "tool", "model", "verify"], kinds
            assert trajectory["turns"][1]["name"] == "lookup_capital"
        elif line["rollout_id"] in chain_ids:
            assert kinds == ["model", "tool"] * 3 + ["verify"], kinds
        else:
            assert kinds == ["model", "verify"], kinds
            # the environment's own sampling arguments reached the model server
            assert trajectory["turns"][0]["params"]["max_completion_tokens"] == 64
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr


IN_FLIGHT = 1000
#: Seconds each model turn is held: long enough that all 1,000 rollouts are admitted before
#: the first finishes.
SLOW_TURN_S = 8.0


def max_overlap(records: list[dict[str, Any]]) -> int:
    events = sorted(
        [(r["started_at"], 1) for r in records] + [(r["finished_at"], -1) for r in records]
    )
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def test_1000_rollouts_in_flight_over_one_verifiers_environment(tmp_path: Path) -> None:
    job = VerifiersJob(tmp_path)
    job.write(
        {
            "policy": simulated_model(SLOW_TURN_S),
            "capitals": verifiers_env("verifiers_capitals"),
        },
        [{"task_id": {"taskset": "capitals", "task_id": i % CAPITALS}} for i in range(IN_FLIGHT)],
        environment_routes={"capitals": "capitals"},
        concurrency=IN_FLIGHT,
        timeout_s=300,
    )
    proc = job.run(timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == IN_FLIGHT and job.summary["failed"] == 0, job.failures[:3]
    assert all(r["reward"] == 1.0 and r["result"]["tool_calls"] == 1 for r in records)
    assert max_overlap(records) >= IN_FLIGHT
