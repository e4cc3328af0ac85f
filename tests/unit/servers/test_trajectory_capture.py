"""Trajectory capture through the library API: real agent, environment and model in-process."""

from __future__ import annotations

import asyncio
from typing import Any

from test_agents import stack

from rollgym import Collector, RolloutResult
from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.servers.agent import Agent, task_of
from rollgym.servers.rollout_context import RolloutContext
from rollgym.trajectory.record import capture_mode
from rollgym.trajectory.tokens import token_sequence


def test_capture_mode_server_options_win_over_the_run() -> None:
    assert capture_mode(None, None, None) == "off"
    assert capture_mode("turns", None, None) == "turns"
    assert capture_mode("tokens", None, None) == "tokens"
    assert capture_mode("bogus", None, None) == "off"
    assert capture_mode(None, None, True) == "tokens"
    assert capture_mode("tokens", False, None) == "off"
    assert capture_mode("tokens", None, False) == "turns"
    assert capture_mode(None, True, None) == "turns"
    assert capture_mode("tokens", True, None) == "tokens"


async def _collect(serving: Any, capture: dict[str, bool], **agent: Any) -> list[RolloutResult]:
    exits, urls = await stack(serving)
    async with exits:
        looper = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys", **agent}, urls=dict(urls)
        )
        async with serving(looper) as url:
            rows = [{"seed": seed, "hops": 3} for seed in range(3)]
            async with Collector({"walker": url}, agent="walker", repeats=2, **capture) as c:
                outcomes = [o async for o in c.stream(rows)]
    assert all(isinstance(o, RolloutResult) for o in outcomes)
    return outcomes  # type: ignore[return-value]


async def test_results_carry_the_trajectory_when_asked(serving: Any) -> None:
    outcomes = await _collect(serving, {"capture_tokens": True})
    for outcome in outcomes:
        trajectory = outcome.trajectory
        assert trajectory is not None and "trajectory" not in outcome.result
        assert trajectory["capture"] == "tokens" and trajectory["model_calls"] == 4
        sequence = token_sequence(trajectory)
        assert sequence is not None and sequence.prefix_ok
        generated = sum(
            len(t["completion_ids"]) for t in trajectory["turns"] if t["type"] == "model"
        )
        assert sum(sequence.loss_mask) == generated == trajectory["usage"]["completion_tokens"]
    plain = await _collect(serving, {})
    assert all(o.trajectory is None for o in plain)
    # the agent's own option wins over a run that asks for nothing
    forced = await _collect(serving, {}, trajectories=True, sampling={"temperature": 0.2})
    first = forced[0].trajectory
    assert first is not None and first["capture"] == "turns"
    assert all(t["params"] == {"temperature": 0.2} for t in first["turns"] if t["type"] == "model")


class SdkAgent(Agent):
    """Calls the model only through the OpenAI SDK client of its rollout."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        extra = rollout.trajectory.request_fields() if rollout.trajectory is not None else {}
        answer = await rollout.async_openai().chat.completions.create(
            model="policy", messages=seeded["messages"], temperature=0.5, extra_body=extra
        )
        verdict = await rollout.env.verify(answer.choices[0].message.content)
        return {"reward": verdict["reward"]}


async def _sdk_outcomes(serving: Any, agent_class: Any, n: int) -> list[Any]:
    """``n`` arithmetic rows played by an ``agent_class`` agent named ``sdk`` over the
    quickstart stack, tokens captured: the Collector's outcomes."""
    exits, urls = await stack(serving)
    async with exits:
        agent = agent_class.build(
            "sdk", {"model": "policy", "environment": "arith"}, urls=dict(urls)
        )
        async with serving(agent) as url:
            rows = [{"question": f"{i} + 3"} for i in range(n)]
            async with Collector({"sdk": url}, agent="sdk", capture_tokens=True) as collector:
                return [o async for o in collector.stream(rows)]


async def test_sdk_calls_are_recorded_with_the_engine_tokens(serving: Any) -> None:
    outcomes = await _sdk_outcomes(serving, SdkAgent, 3)
    for outcome in outcomes:
        assert isinstance(outcome, RolloutResult) and outcome.trajectory is not None
        model, verify = outcome.trajectory["turns"]
        assert model["type"] == "model" and verify["type"] == "verify"
        assert model["params"]["temperature"] == 0.5 and model["params"]["return_token_ids"]
        sequence = token_sequence(outcome.trajectory)
        assert sequence is not None and sum(sequence.loss_mask) == len(model["completion_ids"]) > 0
        assert model["usage"]["prompt_tokens"] == len(sequence.prompt_ids)


class BlockingStreamAgent(Agent):
    """Reads a streamed answer through the blocking SDK client, in a thread."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        extra = rollout.trajectory.request_fields() if rollout.trajectory is not None else {}
        client = rollout.openai()

        def ask() -> str:
            stream = client.chat.completions.create(
                model="policy", messages=seeded["messages"], stream=True, extra_body=extra
            )
            return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

        answer = await asyncio.to_thread(ask)
        verdict = await rollout.env.verify(answer)
        return {"reward": verdict["reward"], "answer": answer}


async def test_blocking_sdk_streams_are_recorded_whole(serving: Any) -> None:
    outcomes = await _sdk_outcomes(serving, BlockingStreamAgent, 2)
    for outcome in outcomes:
        assert isinstance(outcome, RolloutResult) and outcome.trajectory is not None
        model = outcome.trajectory["turns"][0]
        assert model["streamed"] is True and model["finish_reason"] == "stop"
        assert model["message"]["content"] == outcome.result["answer"]
        assert model["usage"] is None  # the request did not ask for the usage chunk
        sequence = token_sequence(outcome.trajectory)
        assert sequence is not None and sum(sequence.loss_mask) == len(model["completion_ids"]) > 0
