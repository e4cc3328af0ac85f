"""The dispatch window: attempts a server cannot serve in time wait unsent, their clock not running."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loopback import LoopbackAgent

from rollgym import Collector
from rollgym.driver import dispatch_window
from rollgym.driver.dispatch_window import DispatchWindow, DispatchWindows
from rollgym.driver.outcomes import RolloutFailure


async def test_window_opens_on_quick_answers_and_halves_once_per_round_trip() -> None:
    window = DispatchWindow(ceiling=100, timeout_s=8.0, initial=40)
    for _ in range(40):
        assert await window.acquire() == 0.0
    last = asyncio.ensure_future(window.acquire())
    await asyncio.sleep(0)
    assert not last.done()  # the window is full: the 41st attempt waits unsent
    window.release(0.0, 0.5, timed_out=False)  # quick (<= 2 s): the window opens by one
    assert window.window == 41.0
    await asyncio.sleep(0)
    assert last.done() and window.outstanding == 40  # one answered, one more sent
    sent_before_halving = -1.0
    window.release(sent_before_halving, 5.0, timed_out=False)  # slower than 4 s: halve
    assert window.window == 20.5
    window.release(sent_before_halving, 5.0, timed_out=False)  # same round trip: no more
    window.release(sent_before_halving, 0.0, timed_out=True)
    assert window.window == 20.5
    window.release(0.0, 3.0, timed_out=False)  # between 2 and 4 s: by one per window
    assert window.window == pytest.approx(20.5 + 1 / 20.5)
    assert window.outstanding == 36


async def test_window_never_closes_below_the_floor_nor_opens_past_concurrency() -> None:
    window = DispatchWindow(ceiling=20, timeout_s=1.0, initial=18)
    for _ in range(10):
        await window.acquire()
        window.release(float("inf"), 0.0, timed_out=True)
    assert window.window == dispatch_window.FLOOR
    for _ in range(50):
        await window.acquire()
        window.release(0.0, 0.0, timed_out=False)
    assert window.window == 20


async def test_waiters_go_first_in_first_out_and_a_cancelled_one_takes_no_slot() -> None:
    window = DispatchWindow(ceiling=1, timeout_s=100.0, initial=1)  # one slot, always
    order: list[int] = []
    await window.acquire()

    async def wait(i: int) -> None:
        await window.acquire()
        order.append(i)

    tasks = [asyncio.ensure_future(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.sleep(0)
    for _ in range(2):
        window.release(0.0, 1.0, timed_out=False)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert order == [0, 2]
    assert window.outstanding == 1
    assert tasks[1].cancelled()


async def _run(agent: LoopbackAgent, *, adaptive: bool, n: int) -> list[Any]:
    async with Collector(
        {"a": agent.url},
        agent="a",
        concurrency=n,
        max_attempts=1,
        timeout_s=1.5,
        adaptive_window=adaptive,
    ) as collector:
        return [outcome async for outcome in collector.stream({"q": i} for i in range(n))]


def _saturated(agent: LoopbackAgent) -> None:
    """The agent works on four requests at a time, 0.1 s each: 40 a second."""
    busy = asyncio.Semaphore(4)

    async def saturated(body: dict[str, Any]) -> tuple[int, Any]:
        async with busy:
            await asyncio.sleep(0.1)
        return 200, {"reward": 1.0}

    agent.behaviour = saturated


async def test_a_server_that_serves_four_at_a_time_times_nothing_out(
    agent: LoopbackAgent, second_agent: LoopbackAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saturated server, played for real. Sending all 120 attempts at once, the last wait
    3 s for it, past ``timeout_s`` 1.5; with the window they wait unsent in the driver, their
    clock not started, and none times out. (Two servers: the one whose clients gave up is
    still working through what they sent.)"""
    monkeypatch.setattr(dispatch_window, "INITIAL", dispatch_window.FLOOR)
    _saturated(agent)
    all_at_once = await _run(agent, adaptive=False, n=120)
    # far more than it serves within timeout_s (4 x 1.5 / 0.1 = 60): on a busy machine the
    # driver may not get all 120 out before the first answers
    assert agent.peak_in_flight > 60
    timed_out = [o for o in all_at_once if isinstance(o, RolloutFailure)]
    assert timed_out and {o.error_kind for o in timed_out} == {"timeout"}

    _saturated(second_agent)
    windowed = await _run(second_agent, adaptive=True, n=120)
    assert [o for o in windowed if isinstance(o, RolloutFailure)] == []
    assert len(windowed) == 120
    assert second_agent.peak_in_flight < 120


async def test_the_first_halving_of_a_servers_window_is_said_once_with_what_to_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    windows = DispatchWindows(ceiling=64, timeout_s=10.0)
    solver = windows.of("solver")
    for _ in range(4):
        await solver.acquire()
    with caplog.at_level("WARNING", logger="rollgym.driver.dispatch_window"):
        solver.release(0.0, 1.0, timed_out=False)  # quick: opens, nothing said
        assert caplog.records == []
        solver.release(float("inf"), 6.2, timed_out=False)  # over half of 10 s: halved
        solver.release(float("inf"), 0.0, timed_out=True)  # halved again later: not said
        keys = windows.of("keys")
        await keys.acquire()
        keys.release(float("inf"), 0.0, timed_out=True)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith(
        "dispatch to 'solver': an attempt took 6.2 s, over half of run.timeout_s (10 s), "
        "so its dispatch window is halved to 32 attempts at once"
    )
    assert "set run.adaptive_window: false" in messages[0]
    assert messages[1].startswith(
        "dispatch to 'keys': an attempt timed out after run.timeout_s (10 s)"
    )
    assert windows.view()["solver"] == {"window": 16, "sent": 1, "waiting": 0}
