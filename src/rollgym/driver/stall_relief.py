"""Stall relief: a server that stops answering holds only its own rollouts, never the run.

``run.concurrency`` workers each run one rollout to its end. When one of several servers stops
answering (stopped, wedged, its machine swapping) while its port stays open, every attempt
sent to it waits out ``run.timeout_s``; since rows for it keep arriving, one worker after
another ends up waiting on it, and the rollouts of every other server wait behind them: one
bad server froze the whole run for ``timeout_s`` at a time.

A server is *stalled* when it has attempts outstanding and has answered none of them for
longer than it ever needs: :data:`FACTOR` times its slowest recent answer (at least
:data:`FLOOR_S`; before its first answer, a quarter of ``timeout_s``, the dispatch window's
own "fast" bound). While it is stalled:

* its outstanding attempts do not count against ``run.concurrency``: the pool admits as many
  spare workers (at most ``concurrency`` more), so the other servers keep their share;
* new rollouts for it are *held back* unsent (at most :data:`HELD_PER_WORKER` per worker, and
  :data:`HELD_MIN` in all) and the worker takes the next row instead. They go out as soon as the server answers again, or,
  once the input is exhausted, whatever its state (then they time out and are retried or
  failed exactly as before: nothing is lost and nothing waits forever).

Retries are not held back: an attempt that timed out is retried as before. Between replicas
of one server nothing of this is needed (the other replica answers, so the server is not
stalled; the replica set takes the silent one out of rotation on its own).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable

from rollgym.driver.dispatch_window import DispatchWindows
from rollgym.driver.rows import Rollout, WorkItem

#: A server silent this many times its slowest recent answer is stalled.
FACTOR = 4.0
#: ... and never sooner than this many seconds.
FLOOR_S = 1.0
#: How often the watch looks at the servers.
CHECK_S = 0.25
#: Rollouts held back for stalled servers, per worker of ``run.concurrency`` ...
HELD_PER_WORKER = 16
#: ... and at least this many in all (a few MB of rows).
HELD_MIN = 4096


class StallRelief:
    """The watch over the dispatch windows, and the rollouts it holds back.

    ``on_spare(n)`` is told how many workers the stalled attempts are worth (the pool admits
    that many more); :meth:`hold`, :meth:`ready` and :meth:`any_held` are the pool's
    :class:`~rollgym.driver.admission.Holdback`.
    """

    def __init__(
        self,
        windows: DispatchWindows,
        concurrency: int,
        timeout_s: float,
        on_spare: Callable[[int], None],
    ) -> None:
        self._windows = windows
        self._concurrency = concurrency
        self._first_answer_s = timeout_s / 4
        self._on_spare = on_spare
        self._held: dict[str, collections.deque[Rollout]] = {}
        self._held_count = 0
        self._capacity = max(HELD_MIN, HELD_PER_WORKER * concurrency)
        #: Per server: answers counted at the last look, and when it last made progress.
        self._seen: dict[str, tuple[int, float]] = {}
        #: Servers stalled at the last look (empty while all answer: one check per row).
        self.stalled: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None

    # -- the pool's Holdback ------------------------------------------------------------

    def hold(self, item: WorkItem) -> bool:
        """Keep ``item`` back when its server is stalled and there is room; True if kept."""
        if not self.stalled or not isinstance(item, Rollout):
            return False
        server = item.target.server_name
        if server not in self.stalled or self._held_count >= self._capacity:
            return False
        self._held.setdefault(server, collections.deque()).append(item)
        self._held_count += 1
        return True

    def ready(self) -> WorkItem | None:
        """A held rollout whose server answers again, oldest first; None if there is none."""
        if not self._held_count:
            return None
        for server, queue in self._held.items():
            if queue and server not in self.stalled:
                return self._take(queue)
        return None

    def any_held(self) -> WorkItem | None:
        """Any held rollout (the input is exhausted: it is sent, stalled server or not)."""
        if not self._held_count:
            return None
        for queue in self._held.values():
            if queue:
                return self._take(queue)
        return None

    @property
    def held(self) -> int:
        return self._held_count

    def _take(self, queue: collections.deque[Rollout]) -> Rollout:
        self._held_count -= 1
        return queue.popleft()

    # -- the watch ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_S)
            self.look(time.perf_counter())

    def look(self, now: float) -> None:
        """Decide which servers are stalled now, and how many spare workers that is worth."""
        stalled: set[str] = set()
        stuck = 0
        for server, window in self._windows.windows().items():
            answered, progressed = self._seen.get(server, (-1, now))
            if window.answered != answered or window.outstanding == 0:
                self._seen[server] = (window.answered, now)
                continue
            slowest = window.slowest_s
            patience = max(FLOOR_S, FACTOR * slowest) if slowest else self._first_answer_s
            if now - progressed > patience:
                stalled.add(server)
                stuck += window.outstanding
        if stalled != self.stalled:
            self.stalled = frozenset(stalled)
        # spare workers serve the servers that still answer; when none does, they would only
        # send more to the silent ones
        answering = len(stalled) < len(self._windows.windows())
        self._on_spare(min(stuck, self._concurrency) if answering else 0)
