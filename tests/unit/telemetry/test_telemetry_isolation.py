"""Context isolation with 1,000 rollouts in flight in one process (TELEMETRY.md invariant)."""

from __future__ import annotations

import asyncio
import random

from rollgym.telemetry import spans

N = 1000


async def _rollout(i: int, barrier: asyncio.Event) -> None:
    row = {"task_index": i, "rollout_index": 0, "attempt": 0}
    rid = f"{i}-0"
    with spans.dispatch_span(row, "agent", "agent"), spans.rollout_span(rid):
        await barrier.wait()  # all 1,000 are open at once
        for turn in range(2):
            with spans.model_chat_span(rid, "m", "p"):
                await asyncio.sleep(random.random() / 1000)
            with spans.env_tool_span(rid, f"t{turn}"):
                await asyncio.sleep(0)
        with spans.verify_span(rid):
            await asyncio.sleep(0)


async def test_every_span_sits_in_its_own_rollouts_trace(exporter):
    barrier = asyncio.Event()
    with spans.job_span("run-iso"):
        tasks = [asyncio.create_task(_rollout(i, barrier)) for i in range(N)]
        await asyncio.sleep(0)
        barrier.set()
        await asyncio.gather(*tasks)
    finished = exporter.get_finished_spans()
    roots = {s.context.trace_id: s for s in finished if s.name == "gym.rollout.dispatch"}
    assert len(roots) == N
    checked = 0
    for s in finished:
        rid = s.attributes.get("gym.rollout.id")
        if rid is None:
            continue
        assert roots[s.context.trace_id].attributes["gym.rollout.id"] == rid, s.name
        checked += 1
    assert checked == N * 7
