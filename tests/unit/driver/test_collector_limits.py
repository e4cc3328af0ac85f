"""The Collector's size limits and redirect rule, against a real loopback agent."""

from __future__ import annotations

from typing import Any

from loopback import LoopbackAgent, collect_all

from rollgym import Collector, RolloutFailure, RolloutResult


async def test_an_answer_over_max_response_bytes_is_a_permanent_failure(
    agent: LoopbackAgent,
) -> None:
    async def huge(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"reward": 1.0, "answer": "x" * (3 << 20)}

    agent.behaviour = huge
    async with Collector(
        {"a": agent.url}, agent="a", max_response_bytes=1 << 20, retry_backoff_s=0.001
    ) as collector:
        (outcome,) = await collect_all(collector.stream([{"q": 1}]))
    assert isinstance(outcome, RolloutFailure)
    assert (outcome.error_kind, outcome.attempt) == ("response_too_large", 0)
    assert "run.max_response_bytes" in outcome.message
    assert len(agent.bodies) == 1  # permanent: never retried


async def test_a_row_over_max_request_bytes_is_refused_before_sending(
    agent: LoopbackAgent,
) -> None:
    rows = [{"q": "w" * 8192}, {"q": "small"}]
    async with Collector({"a": agent.url}, agent="a", max_request_bytes=4096) as collector:
        outcomes = await collect_all(collector.stream(rows))
    by_task = {o.task_index: o for o in outcomes}
    assert isinstance(by_task[0], RolloutFailure)
    assert by_task[0].error_kind == "request_too_large"
    assert "run.max_request_bytes" in by_task[0].message
    assert isinstance(by_task[1], RolloutResult)
    assert [body["q"] for body in agent.bodies] == ["small"]
