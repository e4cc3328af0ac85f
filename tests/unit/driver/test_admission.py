"""Admission: never more than ``concurrency`` in flight, never a task per row."""

from __future__ import annotations

import asyncio
from typing import Any

from loopback import LoopbackAgent

from rollgym import Collector
from rollgym.driver.admission import SharedSource, WorkerPool


def _driver_tasks() -> list[asyncio.Task[Any]]:
    """Tasks rollgym created: not aiohttp's own (the loopback server's handlers, and the client's
    per-request body writer, which aiohttp bounds by the connection limit)."""
    return [
        task for task in asyncio.all_tasks() if "aiohttp" not in task.get_coro().cr_code.co_filename
    ]


async def test_in_flight_and_tasks_alive_are_bounded(agent: LoopbackAgent) -> None:
    async def hold(body: dict[str, Any]) -> tuple[int, Any]:
        await asyncio.sleep(0.01)
        return 200, {"reward": 1}

    agent.behaviour = hold
    baseline = len(_driver_tasks())
    peak_tasks = 0
    count = 0
    async with Collector({"a": agent.url}, agent="a", concurrency=8) as collector:
        async for _ in collector.stream({"q": i} for i in range(400)):
            count += 1
            assert len(collector.in_flight) <= 8
            peak_tasks = max(peak_tasks, len(_driver_tasks()) - baseline)
    assert count == 400
    assert agent.peak_in_flight == 8
    assert peak_tasks <= 8 + 2  # the workers and a constant few, not one per row


async def test_rows_are_pulled_lazily() -> None:
    pulled = 0

    def rows():
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield i

    seen: list[int] = []
    done = asyncio.Event()

    async def work(item: int) -> None:
        seen.append(item)
        await asyncio.sleep(0)

    source: SharedSource[int] = SharedSource(iter(rows()))
    pool: WorkerPool[int] = WorkerPool(source, work, 4, done.set)
    pool.start()
    await asyncio.sleep(0)
    assert pulled <= 4
    await done.wait()
    await pool.join()
    assert sorted(seen) == list(range(10_000))


async def test_workers_start_as_items_come_never_more_than_items() -> None:
    """``run.concurrency=1000000000`` on five rows: five workers and one that found nothing,
    not a billion tasks (which took every byte of the machine before the first rollout)."""
    peak = 0
    done = asyncio.Event()
    release = asyncio.Event()

    async def work(item: int) -> None:
        nonlocal peak
        peak = max(peak, pool.alive)
        await release.wait()  # all five in flight at once

    # 10**5, not 10**9: were workers made up front again, this fails, not the machine
    pool: WorkerPool[int] = WorkerPool(SharedSource(iter(range(5))), work, 10**5, done.set)
    pool.start()
    for _ in range(20):
        await asyncio.sleep(0)
    assert pool.alive == 5  # five busy; a sixth found the source empty and ended
    release.set()
    await done.wait()
    await pool.join()
    assert peak <= 6 and pool.alive == 0


async def test_join_waits_for_workers_started_after_it_began() -> None:
    seen: list[int] = []
    done = asyncio.Event()

    async def work(item: int) -> None:
        await asyncio.sleep(0.001)
        seen.append(item)

    pool: WorkerPool[int] = WorkerPool(SharedSource(iter(range(50))), work, 8, done.set)
    pool.start()
    await pool.join()  # at once: one worker exists, the others start while it waits
    assert sorted(seen) == list(range(50)) and done.is_set()
