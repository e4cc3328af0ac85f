"""The Collector against a real loopback HTTP agent: routing, identity, retries, failures."""

from __future__ import annotations

import asyncio
from typing import Any

from loopback import LoopbackAgent, collect_all

from rollgym import Collector, RolloutFailure, RolloutResult
from waits import until


def _by_id(outcomes: list[Any]) -> dict[str, Any]:
    return {o.rollout_id: o for o in outcomes}


async def test_identity_stamping_and_explicit_ids(agent: LoopbackAgent) -> None:
    rows = [{"q": 0}, {"q": 1}, {"q": 2}, {"q": 3, "rollout_id": "custom"}]
    async with Collector({"solver": agent.url}, agent="solver", repeats=2) as collector:
        outcomes = await collect_all(collector.stream(rows))
    assert set(_by_id(outcomes)) == {
        "0-0",
        "0-1",
        "1-0",
        "1-1",
        "2-0",
        "2-1",
        "custom",
        "custom-r1",
    }
    result = _by_id(outcomes)["2-1"]
    assert isinstance(result, RolloutResult)
    assert result.result["echo"] == {"q": 2, "task_index": 2, "rollout_index": 1, "attempt": 0}
    assert result.reward == 1.0 and result.dispatch_name == "solver"


async def test_retry_then_success_gets_a_new_attempt_id(agent: LoopbackAgent) -> None:
    async def flaky(body: dict[str, Any]) -> tuple[int, Any]:
        if body["attempt"] < 2:
            return 500, {"error": "boom"}
        return 200, {"reward": 0.5}

    agent.behaviour = flaky
    async with Collector({"a": agent.url}, agent="a", retry_backoff_s=0.001) as collector:
        (outcome,) = await collect_all(collector.stream([{"q": 1}]))
    assert isinstance(outcome, RolloutResult)
    assert (outcome.rollout_id, outcome.attempt, outcome.reward) == ("0-0-a2", 2, 0.5)
    assert [b["attempt"] for b in agent.bodies] == [0, 1, 2]


async def test_retry_exhausted_is_a_failure_not_a_zero_reward(agent: LoopbackAgent) -> None:
    async def down(body: dict[str, Any]) -> tuple[int, Any]:
        return 503, {"error": "overloaded"}

    agent.behaviour = down
    async with Collector(
        {"a": agent.url}, agent="a", max_attempts=3, retry_backoff_s=0.001
    ) as collector:
        (outcome,) = await collect_all(collector.stream([{"rollout_id": "x"}]))
    assert isinstance(outcome, RolloutFailure)
    assert (outcome.rollout_id, outcome.attempt, outcome.error_kind) == ("x-a2", 2, "http_5xx")
    assert "HTTP 503: overloaded" in outcome.message and "after 3 attempts" in outcome.message


async def test_permanent_failures_are_not_retried(agent: LoopbackAgent) -> None:
    answers = {
        0: (400, {"error": "bad task", "field": "q"}),
        1: (200, {"score": 1}),
        2: (200, {"reward": True}),
        3: (200, b'{"reward": NaN}'),
        4: (200, b"not json"),
        5: (200, [1, 2]),
        6: (413, {"error": "request body over the 1024 byte limit"}),
    }

    async def varied(body: dict[str, Any]) -> tuple[int, Any]:
        return answers[body["q"]]

    agent.behaviour = varied
    async with Collector({"a": agent.url}, agent="a", retry_backoff_s=0.001) as collector:
        outcomes = await collect_all(collector.stream([{"q": i} for i in answers]))
    by_task = {o.task_index: o for o in outcomes}
    assert all(isinstance(o, RolloutFailure) and o.attempt == 0 for o in outcomes)
    assert by_task[0].error_kind == "http_4xx" and "bad task (field 'q')" in by_task[0].message
    assert by_task[1].error_kind == "missing_reward" and "no 'reward'" in by_task[1].message
    assert by_task[2].error_kind == "missing_reward"
    assert by_task[3].error_kind == "invalid_response"
    assert by_task[4].error_kind == "invalid_response"
    assert by_task[5].error_kind == "missing_reward"
    assert by_task[6].error_kind == "http_4xx" and "HTTP 413" in by_task[6].message
    assert len(agent.bodies) == len(answers)


async def test_timeout_is_retried_and_named(agent: LoopbackAgent) -> None:
    async def slow(body: dict[str, Any]) -> tuple[int, Any]:
        await asyncio.sleep(5)
        return 200, {"reward": 1}

    agent.behaviour = slow
    async with Collector(
        {"a": agent.url}, agent="a", timeout_s=0.2, max_attempts=2, retry_backoff_s=0.001
    ) as collector:
        (outcome,) = await collect_all(collector.stream([{"q": 1}]))
    assert isinstance(outcome, RolloutFailure)
    assert (outcome.error_kind, outcome.attempt) == ("timeout", 1)


async def test_connection_error_is_transient() -> None:
    async with Collector(
        {"a": "http://127.0.0.1:9"}, agent="a", max_attempts=2, retry_backoff_s=0.001
    ) as collector:
        (outcome,) = await collect_all(collector.stream([{"q": 1}]))
    assert (outcome.error_kind, outcome.attempt) == ("connection_error", 1)


async def test_episode_routing_posts_the_episode_body(
    agent: LoopbackAgent, second_agent: LoopbackAgent
) -> None:
    rows = [
        {"task_id": {"taskset": "arith", "task_id": 7}, "prompt": "1+1", "attempt": 3},
        {"q": 1},
    ]
    async with Collector(
        {"solver": agent.url, "env": second_agent.url},
        agent="solver",
        environment_routes={"arith": "env"},
    ) as collector:
        outcomes = _by_id(await collect_all(collector.stream(rows)))
    assert outcomes["0-0"].dispatch_name == "env" and outcomes["1-0"].dispatch_name == "solver"
    (episode,) = second_agent.bodies
    assert episode == {
        "episode_id": {"rollout_id": "0-0", "attempt": 0},
        "task": {"task_id": {"taskset": "arith", "task_id": 7}, "prompt": "1+1"},
    }


async def test_async_iterable_rows(agent: LoopbackAgent) -> None:
    async def rows():
        for i in range(5):
            await asyncio.sleep(0)
            yield {"q": i}

    async with Collector({"a": agent.url}, agent="a", concurrency=3) as collector:
        outcomes = await collect_all(collector.stream(rows()))
    assert sorted(o.rollout_id for o in outcomes) == [f"{i}-0" for i in range(5)]


async def test_interrupt_records_in_flight_as_cancelled(agent: LoopbackAgent) -> None:
    async def hang(body: dict[str, Any]) -> tuple[int, Any]:
        if body["q"] == 0:
            return 200, {"reward": 1}
        await asyncio.sleep(30)
        return 200, {"reward": 1}

    agent.behaviour = hang
    outcomes = []
    async with Collector({"a": agent.url}, agent="a", concurrency=4) as collector:
        async for outcome in collector.stream([{"q": i} for i in range(100)]):
            outcomes.append(outcome)
            if len(outcomes) == 1:
                await until(lambda: len(collector.in_flight) >= 4, "four rollouts in flight")
                collector.interrupt()
    kinds = sorted(getattr(o, "error_kind", "ok") for o in outcomes)
    assert kinds == ["cancelled"] * 4 + ["ok"]
    assert len(collector.in_flight) == 0


async def test_an_id_a_terminal_cannot_carry_is_refused_at_its_row(agent: LoopbackAgent) -> None:
    rows = [{"q": 0, "rollout_id": "tâche-1"}, {"q": 1, "rollout_id": "x\x1b[2J\nfake"}]
    async with Collector({"solver": agent.url}, agent="solver") as collector:
        outcomes = await collect_all(collector.stream(rows))
    good = _by_id(outcomes)["tâche-1"]
    assert isinstance(good, RolloutResult)
    (bad,) = [o for o in outcomes if isinstance(o, RolloutFailure)]
    assert bad.error_kind == "invalid_row" and bad.line == 2 and bad.rollout_id is None
    assert bad.message.startswith("<rows>:2: field 'rollout_id': character U+001B")
