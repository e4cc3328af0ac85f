"""A stream abandoned mid-way (``break`` out of ``groups()``) and resumed at once on the same
collector: the abandoned one's rollouts end before the resumed one's start under the same ids.

The abandoned generator is closed only later, by the event loop's finalizer task; before, the
resumed stream ran the same rollouts beside it and one of them ended in a ``KeyError``."""

from __future__ import annotations

import asyncio
from typing import Any

from loopback import LoopbackAgent

from rollgym import Collector, RolloutResult


async def test_a_resume_right_after_a_break_runs_each_rollout_once(agent: LoopbackAgent) -> None:
    async def slow_for_task_one(body: dict[str, Any]) -> tuple[int, Any]:
        if body["task_index"] == 1:
            await asyncio.sleep(0.3)
        return 200, {"reward": 1.0}

    agent.behaviour = slow_for_task_one
    rows = [{"q": 0}, {"q": 1}]
    async with Collector({"a": agent.url}, agent="a", concurrency=4, repeats=2) as collector:
        first = []
        async for group in collector.groups(rows):
            first.append(group)
            break  # task 1's rollouts are still in flight
        resumed = [group async for group in collector.groups(rows, finished=first[0])]
        assert not collector.in_flight
    assert [o.task_index for o in first[0]] == [0, 0]
    assert resumed[0] == first[0] and len(resumed) == 2
    assert all(isinstance(o, RolloutResult) for o in resumed[1])
    assert [(o.task_index, o.rollout_index) for o in resumed[1]] == [(1, 0), (1, 1)]
