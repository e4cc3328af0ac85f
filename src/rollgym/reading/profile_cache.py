"""The viewer's profile, computed once per change of the store and at a bounded rate.

Why: the profile page refreshes every 2 s while a run goes, and profiling a large store takes
seconds (worker processes over trace-id ranges, :mod:`profile_ranges`). Recomputed per request,
a 20,000-dispatch run's viewer kept a second profile going behind the first and took the
cores the run itself needed. So requests share one computation (a lock: two tabs wait for the
same one), an unchanged store (the size and mtime of ``traces.db`` and its WAL) is answered
from memory, and while the run is going a changed store is profiled again only once the last
answer is older than :attr:`ThrottledCache.factor` times what that answer cost to compute
(never sooner than ``min_interval_s``): profiling then takes at most about
``1 / (factor + 1)`` of one core's time, however often the page asks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

#: What profiling may take of the time while a run goes: recompute after ``factor`` x its cost.
FACTOR = 4.0
#: Never recompute a live profile sooner than this (seconds).
MIN_INTERVAL_S = 1.0


def store_stamp(db_path: Path) -> tuple[tuple[int, int], ...]:
    """What changes when the store gains a span: (size, mtime ns) of the file and its WAL."""
    return file_stamps([db_path, db_path.with_name(db_path.name + "-wal")])


def file_stamps(paths: list[Path]) -> tuple[tuple[int, int], ...]:
    """(size, mtime ns) of each path, ``(-1, -1)`` for one that is not there: what changes
    when a file gains a line."""
    stamps = []
    for path in paths:
        try:
            info = path.stat()
            stamps.append((info.st_size, info.st_mtime_ns))
        except OSError:
            stamps.append((-1, -1))
    return tuple(stamps)


class ThrottledCache(Generic[T]):
    """One value, computed again when its stamp changed and, if ``live``, not too often."""

    def __init__(
        self,
        *,
        factor: float = FACTOR,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factor = factor
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._value: T | None = None
        self._stamp: Hashable = None
        self._at = 0.0
        self._took = 0.0
        #: How many times the value was computed (for tests and the bench).
        self.computed = 0

    def _fresh_enough(self, stamp: Hashable, live: bool) -> bool:
        if self._value is None:
            return False
        if stamp == self._stamp:
            return True
        interval = max(self.min_interval_s, self.factor * self._took)
        return live and self._clock() - self._at < interval

    async def get(self, stamp: Hashable, live: bool, compute: Callable[[], Awaitable[T]]) -> T:
        """The value for ``stamp``: the kept one while fresh enough, else ``compute()``'s.
        ``live``: the run is still going (a finished run is always answered up to date)."""
        async with self._lock:
            if not self._fresh_enough(stamp, live):
                started = self._clock()
                value = await compute()
                self._at = self._clock()
                self._took = self._at - started
                self._value, self._stamp = value, stamp
                self.computed += 1
            assert self._value is not None
            return self._value
