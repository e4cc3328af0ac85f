"""A rollout whose model answer was cut short is never handed over as a whole one: by default
it is run again and, once its attempts are spent, an ``incomplete_model_call`` failure; with
``incomplete_model_calls="accept"`` it is kept, and summary.json counts it.

Real parts on loopback: an SDK agent served by rollgym, the Collector, and an upstream that
ends its stream the way llama.cpp's server does when another request interrupts it.
"""

from __future__ import annotations

from typing import Any

from test_sdk_recording import ARITH, loopback_upstream

from rollgym import Collector, RolloutFailure, RolloutResult
from rollgym.driver.summary import Aggregator, Summary
from rollgym.servers.agent import Agent
from rollgym.servers.rollout_context import RolloutContext


class StreamingAgent(Agent):
    """One streamed SDK call; the reward is whether any text arrived."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        stream = await rollout.async_openai().chat.completions.create(
            model="m", messages=ARITH, stream=True, extra_headers={"x-cut": row["cut"]}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return {"reward": float(bool(text)), "text": text}


async def _collect(serving: Any, **settings: Any) -> list[Any]:
    async with loopback_upstream() as upstream:
        agent = StreamingAgent.build("sdk", {"model": "policy"}, urls={"policy": upstream})
        async with serving(agent) as url:
            rows = [{"cut": "interrupted"}, {"cut": "closed"}]
            async with Collector(
                {"sdk": url}, agent="sdk", max_attempts=2, retry_backoff_s=0, **settings
            ) as collector:
                return [o async for o in collector.stream(rows)]


async def test_by_default_a_cut_answer_is_retried_then_a_failure(serving: Any) -> None:
    outcomes = await _collect(serving)
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert isinstance(outcome, RolloutFailure), outcome
        assert outcome.error_kind == "incomplete_model_call" and outcome.attempt == 1
        assert "incomplete_model_calls: accept" in outcome.message
    aggregator = Aggregator(1, 1.0)
    for outcome in outcomes:
        aggregator.add_failure(outcome.dispatch_name, outcome.error_kind)
    summary = Summary.from_aggregator("r", "ok", aggregator, 1.0, 2).to_json()
    assert summary["failed_by_kind"] == {"incomplete_model_call": 2}
    assert summary["incomplete_model_calls"]["failed_rollouts"] == 2


async def test_accepted_it_is_kept_flagged_and_counted(serving: Any) -> None:
    outcomes = await _collect(serving, incomplete_model_calls="accept", trajectories=True)
    assert all(isinstance(o, RolloutResult) and o.attempt == 0 for o in outcomes)
    reasons = sorted(o.trajectory["turns"][0]["incomplete"] for o in outcomes)
    assert reasons == ["no_finish_reason", "stream_cut"]
    aggregator = Aggregator(1, 1.0)
    for outcome in outcomes:
        assert outcome.usage["incomplete_calls"] == 1
        aggregator.add_result("sdk", outcome.task_index, outcome.reward, outcome.usage)
    summary = Summary.from_aggregator("r", "ok", aggregator, 1.0, 2).to_json()
    assert summary["incomplete_model_calls"] == {
        "calls_in_results": 2,
        "results": 2,
        "failed_rollouts": 0,
    }
    assert summary["by_dispatch_name"]["sdk"]["usage"]["incomplete_calls"] == 2
