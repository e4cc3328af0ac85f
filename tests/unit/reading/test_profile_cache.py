"""The viewer's profile cache: one computation per store change, at a bounded rate while a
run goes, shared by concurrent requests; a finished run is always answered up to date."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from rollgym.reading.live import run_going
from rollgym.reading.profile_cache import ThrottledCache, store_stamp


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cache(clock: Clock, cost_s: float) -> tuple[ThrottledCache[int], Callable[[], Awaitable[int]]]:
    cache: ThrottledCache[int] = ThrottledCache(factor=4.0, min_interval_s=1.0, clock=clock)

    async def compute() -> int:
        clock.now += cost_s  # what profiling the store took
        await asyncio.sleep(0)
        return cache.computed + 1

    return cache, compute


def test_an_unchanged_store_is_answered_from_memory() -> None:
    clock = Clock()
    cache, compute = _cache(clock, 0.5)

    async def go() -> list[int]:
        return [await cache.get("a", False, compute) for _ in range(3)]

    assert asyncio.run(go()) == [1, 1, 1] and cache.computed == 1


def test_a_live_store_is_profiled_again_only_after_factor_times_the_cost() -> None:
    clock = Clock()
    cache, compute = _cache(clock, 5.0)  # a large store: 5 s a profile

    async def go() -> list[int]:
        seen = [await cache.get(0, True, compute)]
        for stamp in range(1, 30):  # the page asks every 2 s, the store changes each time
            clock.now += 2.0
            seen.append(await cache.get(stamp, True, compute))
        return seen

    seen = asyncio.run(go())
    # 58 s of asking: at most one profile per 20 s (4 x 5 s), not one per request
    assert cache.computed == 3 and seen[-1] == 3


def test_a_finished_run_gets_the_store_as_it_is_now() -> None:
    clock = Clock()
    cache, compute = _cache(clock, 5.0)

    async def go() -> tuple[int, int]:
        first = await cache.get("during", True, compute)
        clock.now += 0.1
        return first, await cache.get("final", False, compute)

    assert asyncio.run(go()) == (1, 2)


def test_concurrent_requests_share_one_computation() -> None:
    clock = Clock()
    cache, compute = _cache(clock, 0.5)

    async def go() -> list[int]:
        return list(await asyncio.gather(*(cache.get("s", True, compute) for _ in range(5))))

    assert asyncio.run(go()) == [1] * 5 and cache.computed == 1


def test_the_stamp_follows_the_store_and_its_wal(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    missing = store_stamp(db)
    db.write_bytes(b"x")
    with_db = store_stamp(db)
    (tmp_path / "traces.db-wal").write_bytes(b"yy")
    assert len({missing, with_db, store_stamp(db)}) == 3


def test_run_going_reads_progress_as_the_viewer_does() -> None:
    assert not run_going(None)
    assert run_going({"total": 10, "completed": 3, "failed": 1, "in_flight": 4})
    assert not run_going({"total": 10, "completed": 9, "failed": 1, "in_flight": 0})
    assert run_going({"total": None, "completed": 3, "failed": 0, "in_flight": 2})
    assert not run_going({"total": None, "completed": 3, "failed": 0, "in_flight": 0})
