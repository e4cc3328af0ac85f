"""Agents and the environment's episode /run, with model and environment served in-process."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.agents.single_turn import SingleTurnAgent
from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.arithmetic import ArithmeticEnv
from rollgym.builtins.envs.keychain import KeychainEnv
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.errors import HTTPError, ServerCallError
from rollgym.identity import episode_body
from rollgym.servers.agent import Agent, task_of
from rollgym.servers.answers import FAILED_DEPENDENCY, guarded
from rollgym.servers.rollout_context import RolloutContext
from rollgym.telemetry import names

FAST = {"kind": "fixed", "seconds": 0.0}


class NoRewardAgent(Agent):
    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        return {"score": 1.0}


class NanRewardAgent(Agent):
    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        return {"reward": float("nan")}


class BoolRewardAgent(Agent):
    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        return {"reward": True}


class BuggyAgent(Agent):
    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        raise KeyError("oops")


async def stack(serving, accuracy: float = 1.0, *, episode: bool = False):
    """Model + both environments; returns (exit stack, urls)."""
    exits = AsyncExitStack()
    urls: dict[str, str] = {}
    urls["policy"] = await exits.enter_async_context(
        serving(SimulatedModel.build("policy", {"accuracy": accuracy, "latency": FAST}))
    )
    env_options = {"model": "policy"} if episode else {}
    urls["arith"] = await exits.enter_async_context(
        serving(ArithmeticEnv.build("arith", env_options, urls=dict(urls)))
    )
    urls["keys"] = await exits.enter_async_context(
        serving(KeychainEnv.build("keys", env_options, urls=dict(urls)))
    )
    return exits, urls


def row(task_index: int, **task: Any) -> dict[str, Any]:
    return {**task, "task_index": task_index, "rollout_index": 0, "attempt": 0}


async def test_single_turn_and_tool_loop_agents_earn_rewards(serving, client):
    exits, urls = await stack(serving)
    async with exits:
        single = SingleTurnAgent.build(
            "solver", {"model": "policy", "environment": "arith"}, urls=urls
        )
        looper = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys", "max_turns": 10}, urls=urls
        )
        async with serving(single) as single_url, serving(looper) as loop_url:
            arith = await client.post_json(
                "solver", single_url + "/run", row(0, question="6 * 7", agent="solver")
            )
            keys = await client.post_json("walker", loop_url + "/run", row(1, seed=3, hops=5))
            short = await client.post_json(
                "walker", loop_url + "/run", row(2, seed=3, hops=5) | {"rollout_id": "few"}
            )
        agg = await client.post_json("keys", urls["keys"] + "/aggregate_metrics", {})
    assert (
        arith.status == 200 and arith.data["reward"] == 1.0 and arith.data["answer"] == "Answer: 42"
    )
    assert keys.status == 200 and keys.data["reward"] == 1.0
    assert keys.data["turns"] == 6 and keys.data["tool_calls"] == 5
    assert keys.data["details"]["chain_followed"] is True
    assert short.data["reward"] == 1.0
    assert agg.data["count"] == 2 and agg.data["tool_calls"]["read_key"] == 10


async def test_max_turns_limits_the_loop(serving, client):
    exits, urls = await stack(serving)
    async with exits:
        looper = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys", "max_turns": 3}, urls=urls
        )
        async with serving(looper) as url:
            answer = await client.post_json("walker", url + "/run", row(1, seed=3, hops=5))
    assert (
        answer.data["reward"] == 0.0 and answer.data["turns"] == 3 and answer.data["answer"] is None
    )


async def test_wrong_policy_gets_zero(serving, client):
    exits, urls = await stack(serving, accuracy=0.0)
    async with exits:
        single = SingleTurnAgent.build(
            "solver", {"model": "policy", "environment": "arith"}, urls=urls
        )
        async with serving(single) as url:
            answer = await client.post_json("solver", url + "/run", row(0, question="6 * 7"))
    assert answer.data["reward"] == 0.0 and answer.data["answer"] != "Answer: 42"


async def test_bad_bodies_and_bad_tasks_are_4xx(serving, client):
    exits, urls = await stack(serving)
    async with exits:
        single = SingleTurnAgent.build(
            "solver", {"model": "policy", "environment": "arith"}, urls=urls
        )
        async with serving(single) as url:
            not_object = await client.post_json("solver", url + "/run", [1, 2])
            bad_task = await client.post_json("solver", url + "/run", row(0, question="import os"))
    assert not_object.status == 400 and not_object.data["field"] == "body"
    assert bad_task.status == 400 and bad_task.data["field"] == "task"
    assert "rejected the task" in bad_task.data["error"]


async def test_answers_without_a_finite_numeric_reward_are_clear_500s(serving, client):
    for cls, text in [
        (NoRewardAgent, "without a numeric 'reward'"),
        (NanRewardAgent, "non-finite 'reward'"),
        (BoolRewardAgent, "without a numeric 'reward' (got True)"),
        (BuggyAgent, "failed: KeyError"),
    ]:
        async with serving(cls.build("odd", {})) as url:
            answer = await client.post_json("odd", url + "/run", row(0))
        assert answer.status == 500, cls
        assert text in answer.data["error"] and "agent 'odd'" in answer.data["error"]


class NumpyAgent(Agent):
    """A result computed with NumPy, as rewards and scores often are."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        np = pytest.importorskip("numpy")
        rewards = {0: np.float32(0.5), 1: np.int64(1), 2: np.bool_(True)}
        return {"reward": rewards[row["q"]], "scores": np.array([0.25, 0.75]), "n": np.int32(2)}


async def test_a_result_computed_with_numpy_is_answered_as_its_numbers(serving, client):
    async with serving(NumpyAgent.build("np", {})) as url:
        answers = [await client.post_json("np", url + "/run", {"q": q}) for q in range(3)]
    assert [a.status for a in answers] == [200, 200, 500]
    assert answers[0].data == {"reward": 0.5, "scores": [0.25, 0.75], "n": 2}
    assert answers[1].data["reward"] == 1 and isinstance(answers[1].data["reward"], int)
    assert "without a numeric 'reward'" in answers[2].data["error"]  # a bool is not a reward


class UnwritableAgent(Agent):
    """Results JSON cannot hold: a set, a lone surrogate (Python's json.loads makes one from
    ``"\\ud800"``), an object."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        odd = [{1, 2}, "cut \ud800", object()][row["q"]]
        return {"reward": 1.0, "info": {"steps": [0, odd]}}


async def test_a_result_json_cannot_hold_is_a_500_naming_where(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(UnwritableAgent.build("odd", {})) as url:
        answers = [await client.post_json("odd", url + "/run", {"q": q}) for q in range(3)]
    assert [a.status for a in answers] == [500, 500, 500]
    rollouts = [s for s in exporter.get_finished_spans() if s.name == names.SPAN_ROLLOUT]
    assert len(rollouts) == 3 and all(not s.status.is_ok for s in rollouts)  # failed there too
    errors = [a.data["error"] for a in answers]
    for error, what in zip(errors, ["a set", "a str", "an object"], strict=True):
        assert "'odd'" in error and "info.steps[1]" in error and what in error, error
    assert "set" in errors[0] and "surrogate" in errors[1] and "object" in errors[2]


async def test_unreachable_model_is_a_502(serving, client):
    exits, urls = await stack(serving)
    async with exits:
        urls = {**urls, "policy": "http://127.0.0.1:9"}
        single = SingleTurnAgent.build(
            "solver", {"model": "policy", "environment": "arith"}, urls=urls
        )
        async with serving(single) as url:
            answer = await client.post_json("solver", url + "/run", row(0, question="1+1"))
    assert answer.status == 502 and "cannot reach 'policy'" in answer.data["error"]


async def test_episode_run_plays_in_process(serving, client):
    exits, urls = await stack(serving, episode=True)
    async with exits:
        keys = await client.post_json(
            "keys", urls["keys"] + "/run", episode_body("ep-1", 0, {"seed": 4, "hops": 3})
        )
        arith = await client.post_json(
            "arith", urls["arith"] + "/run", episode_body("ep-2", 1, {"a": 2, "b": 5, "op": "mul"})
        )
        bad = await client.post_json(
            "keys", urls["keys"] + "/run", {"episode_id": {"rollout_id": "x"}, "task": "nope"}
        )
        bad_task = await client.post_json(
            "keys", urls["keys"] + "/run", episode_body("ep-3", 0, {"hops": 3})
        )
        agg = (await client.post_json("keys", urls["keys"] + "/aggregate_metrics", {})).data
    assert keys.status == 200 and keys.data["reward"] == 1.0 and keys.data["tool_calls"] == 3
    assert arith.status == 200 and arith.data["reward"] == 1.0
    assert bad.status == 400 and bad.data["field"] == "task"
    assert bad_task.status == 400 and "seed" in bad_task.data["error"]
    assert agg["open_sessions"] == 0


async def test_no_episode_route_without_a_model(serving, client):
    async with serving(KeychainEnv.build("keys", {})) as url:
        answer = await client.post_json("keys", url + "/run", episode_body("x", 0, {"seed": 1}))
    assert answer.status == 404


async def test_rollout_spans_and_request_ids_name_the_rollout(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    exits, urls = await stack(serving, episode=True)
    async with exits:
        looper = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys"}, urls=urls
        )
        async with serving(looper) as url:
            await client.post_json(
                "walker", url + "/run", row(4, seed=1, hops=2) | {"rollout_index": 1, "attempt": 2}
            )
        await client.post_json(
            "keys", urls["keys"] + "/run", episode_body("ep-9", 0, {"seed": 1, "hops": 2})
        )
    spans = exporter.get_finished_spans()
    rollouts = [s for s in spans if s.name == names.SPAN_ROLLOUT]
    assert sorted(s.attributes[names.ROLLOUT_ID] for s in rollouts) == ["4-1-a2", "ep-9"]
    chats = [s for s in spans if s.name == names.SPAN_MODEL_CHAT]
    engines = [s for s in spans if s.name == names.SPAN_ENGINE_REQUEST]
    assert len(chats) == len(engines) == 6
    assert {s.attributes[names.ROLLOUT_ID] for s in engines} == {"4-1-a2", "ep-9"}
    assert sorted(
        s.attributes[names.GEN_AI_RESPONSE_ID]
        for s in chats
        if s.attributes[names.ROLLOUT_ID] == "ep-9"
    ) == [
        "chatcmpl-ep-9.0",
        "chatcmpl-ep-9.1",
        "chatcmpl-ep-9.2",
    ]
    # every span of a rollout sits in the trace of its gym.rollout span
    trace_of = {s.attributes[names.ROLLOUT_ID]: s.context.trace_id for s in rollouts}
    for span in spans:
        rollout_id = (span.attributes or {}).get(names.ROLLOUT_ID)
        if rollout_id is not None:
            assert span.context.trace_id == trace_of[rollout_id], span.name


def test_task_of_strips_identity_and_routing():
    assert task_of(
        {
            "seed": 1,
            "agent": "a",
            "task_index": 0,
            "rollout_index": 0,
            "attempt": 0,
            "rollout_id": "x",
        }
    ) == {"seed": 1}


async def test_a_call_refused_for_good_is_424_not_a_retried_502():
    async def refused(status: int) -> None:
        raise ServerCallError(f"chat completion answered HTTP {status}", status=status)

    for status, expected in (
        (400, FAILED_DEPENDENCY),
        (401, FAILED_DEPENDENCY),
        (429, 502),
        (503, 502),
    ):
        with pytest.raises(HTTPError) as answer:
            await guarded("agent 'a'", refused(status))
        assert answer.value.status == expected, status


async def test_a_lost_environment_session_is_retried_not_refused_for_good():
    """An environment that no longer knows the session (its replica was restarted, or the
    session expired) answers 404 naming ``session_id``: a new attempt seeds a new session, so
    the agent answers 502 (retried) where any other 404 is 424 (refused for good)."""

    async def lost(field: str | None) -> None:
        raise ServerCallError("verify answered HTTP 404: unknown session", status=404, field=field)

    for field, expected in (
        ("session_id", 502),
        (None, FAILED_DEPENDENCY),
        ("tool", FAILED_DEPENDENCY),
    ):
        with pytest.raises(HTTPError) as answer:
            await guarded("agent 'a'", lost(field))
        assert answer.value.status == expected, field
