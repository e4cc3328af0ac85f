"""Stall relief: a server that stops answering holds only its own rollouts, never the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loopback import LoopbackAgent

from rollgym import Collector, RolloutResult
from rollgym.driver.dispatch_window import DispatchWindows
from rollgym.driver.stall_relief import FLOOR_S, StallRelief


def _relief(windows: DispatchWindows, spare: list[int]) -> StallRelief:
    return StallRelief(windows, concurrency=8, timeout_s=60.0, on_spare=spare.append)


async def test_a_server_silent_past_its_patience_is_stalled_and_worth_spare_workers() -> None:
    windows = DispatchWindows(8, 60.0)
    quiet, busy = windows.of("quiet"), windows.of("busy")
    for window in (quiet, busy):
        await window.acquire()
        window.release(0.0, 0.05, timed_out=False)  # each has answered fast once
    for _ in range(3):
        await quiet.acquire()
    await busy.acquire()
    spare: list[int] = []
    relief = _relief(windows, spare)
    relief.look(100.0)
    assert relief.stalled == frozenset() and spare == [0]
    busy.release(0.0, 0.05, timed_out=False)  # busy answers; quiet does not
    await busy.acquire()
    relief.look(100.0 + FLOOR_S + 0.1)
    assert relief.stalled == {"quiet"}
    assert spare[-1] == 3  # its three unanswered attempts no longer count against concurrency


async def test_a_timeout_is_not_an_answer_and_a_slow_server_gets_more_patience() -> None:
    windows = DispatchWindows(8, 60.0)
    slow = windows.of("slow")
    await slow.acquire()
    slow.release(0.0, 2.0, timed_out=False)  # its rollouts take 2 s
    await slow.acquire()
    spare: list[int] = []
    relief = _relief(windows, spare)
    relief.look(0.0)
    relief.look(5.0)  # 5 s < 4 x 2 s: still patient
    assert relief.stalled == frozenset()
    await slow.acquire()
    slow.release(0.0, 60.0, timed_out=True)  # a timeout is no sign of life
    relief.look(9.0)
    assert relief.stalled == {"slow"}
    # every server it knows is silent: spare workers would only send it more
    assert spare[-1] == 0


@pytest.mark.timeout(120)
async def test_a_stalled_server_holds_neither_the_workers_nor_the_other_servers_rows(
    agent: LoopbackAgent,
) -> None:
    """Rows alternate between ``a`` (fast) and ``b`` (stops answering until released). Every
    ``a`` row completes while ``b`` is silent (its rollouts wait out no time limit first: it has
    answered in a millisecond before, so a second of silence is enough to tell); then ``b`` answers and every row is accounted
    for exactly once."""
    silent = LoopbackAgent()
    await silent.start()
    wake = asyncio.Event()

    async def hang(body: dict[str, Any]) -> tuple[int, Any]:
        if len(silent.bodies) > 1:  # it answers its first rollout, then goes silent
            await wake.wait()
        return 200, {"reward": 0.0}

    silent.behaviour = hang
    rows = [{"q": i, "agent": "a" if i % 2 else "b"} for i in range(400)]
    done: dict[str, int] = {"a": 0, "b": 0}
    try:
        async with Collector(
            {"a": agent.url, "b": silent.url}, agent="a", concurrency=4, timeout_s=120
        ) as collector:
            stream = collector.stream(rows)
            async for outcome in stream:
                assert isinstance(outcome, RolloutResult)
                done["a" if outcome.task_index % 2 else "b"] += 1
                assert len(collector.in_flight) <= 8  # concurrency plus as many spares
                if done["a"] == 200:
                    break  # every a row finished while b answered nothing more
            assert done == {"a": 200, "b": 1}
            wake.set()
            async for outcome in stream:
                done["a" if outcome.task_index % 2 else "b"] += 1
    finally:
        await silent.stop()
    assert done == {"a": 200, "b": 200}
    sent = sorted(body["q"] for body in agent.bodies + silent.bodies)
    assert sent == list(range(400))  # each sent once: none lost, none run twice
