"""Admission: a fixed pool of workers pulling rollouts from one shared source.

No task is created per row up front and nothing waits on a set whose size grows with the
input: ``concurrency`` workers each take the next work item, run it to its end, hand the
record over and take another. That is O(1) per rollout, bounds both the rollouts in flight and
the tasks alive, and holds 10,000 in flight as easily as 10.

With a :class:`Holdback` (:mod:`rollgym.driver.stall_relief`), a worker may keep an item back
instead of running it (its server has stopped answering) and take the next one, and the pool
may run spare workers beside the ``size`` while attempts are stuck on such a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from rollgym.errors import InvariantBroken

T = TypeVar("T")


class SharedSource(Generic[T]):
    """One iterator shared by every worker.

    A plain iterator needs no lock (nothing awaits between items); an async iterator is
    serialized with a lock, since an async generator cannot be advanced by two tasks at once.
    """

    def __init__(self, items: Iterator[T] | AsyncIterator[T]) -> None:
        self._sync = items if isinstance(items, Iterator) else None
        self._async = None if self._sync is not None else items
        self._lock = asyncio.Lock()
        self.exhausted = False

    def next_now(self) -> T | None:
        """The next item of a plain iterator, without a coroutine (the hot path)."""
        if self._sync is None:
            raise InvariantBroken("next_now() on an asynchronous source: use next()")
        item = next(self._sync, None)
        if item is None:
            self.exhausted = True
        return item

    @property
    def is_sync(self) -> bool:
        return self._sync is not None

    async def next(self) -> T | None:
        """The next item, or None once the source is exhausted (for every caller after)."""
        if self.exhausted:
            return None
        if self._sync is not None:
            item = next(self._sync, None)
        else:
            async with self._lock:
                item = await anext(self._async, None)  # type: ignore[arg-type]
        if item is None:
            self.exhausted = True
        return item


class Holdback(Protocol[T]):
    """Items kept back unrun for a while, and given out again."""

    def hold(self, item: T) -> bool:
        """Keep ``item`` back for later; False: run it now."""
        ...

    def ready(self) -> T | None:
        """A kept item that may run now, or None."""
        ...

    def any_held(self) -> T | None:
        """Any kept item (the source is exhausted), or None when none is left."""
        ...


@dataclass(eq=False)
class WorkerPool(Generic[T]):
    """Up to ``size`` workers running ``work(item)`` for each item of ``source`` until it is
    empty.

    Workers start as items come: one at first, and each worker that takes an item starts
    another while fewer than ``size`` run. So a pool never holds more workers than items plus
    one: ``run.concurrency=1000000000`` on a few hundred rows is a few hundred tasks, not a
    billion (which took every byte of the machine before the first rollout).

    ``stop()`` makes workers take no new item; ``cancel()`` also cancels what is running
    (each ``work`` is responsible for recording its own cancellation). ``on_idle`` is called
    once, when the last worker has exited.
    """

    source: SharedSource[T]
    work: Callable[[T], Awaitable[None]]
    size: int
    on_idle: Callable[[], None]
    holdback: Holdback[T] | None = None
    stopping: bool = field(default=False, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _alive: int = field(default=0, init=False)
    #: Workers beyond ``size`` allowed now (see :meth:`set_spare`).
    _spare: int = field(default=0, init=False)

    def start(self) -> None:
        self._spawn()

    def _spawn(self) -> None:
        self._alive += 1
        self._tasks.append(asyncio.create_task(self._worker()))

    @property
    def alive(self) -> int:
        return self._alive

    def set_spare(self, spare: int) -> None:
        """Allow ``spare`` workers beyond ``size``: one starts at once and, as each takes an
        item, the next (so no more start than there are items); the extra ones retire after
        their current item once fewer are allowed."""
        self._spare = spare
        if self.stopping or self._alive == 0:
            return
        if self._alive >= self.size + spare:
            return
        # spare workers come and go over a long run: forget the ones that ended cleanly
        self._tasks = [task for task in self._tasks if not _ended_cleanly(task)]
        self._spawn()

    async def _worker(self) -> None:
        source = self.source
        sync = source.is_sync  # fixed for the source's life: read once, not per item
        holdback = self.holdback
        try:
            while not self.stopping:
                item = holdback.ready() if holdback is not None else None
                if item is None:
                    item = source.next_now() if sync else await source.next()
                    if item is None:
                        item = holdback.any_held() if holdback is not None else None
                        if item is None:
                            break
                    elif holdback is not None and holdback.hold(item):
                        continue
                if self._alive < self.size + self._spare and not self.stopping:
                    self._spawn()  # an item came: room for one more worker to wait for the next
                await self.work(item)
                if self._alive > self.size + self._spare:
                    break  # a spare worker no longer needed
        finally:
            self._alive -= 1
            if self._alive == 0:
                self.on_idle()

    def stop(self) -> None:
        self.stopping = True

    def cancel(self) -> None:
        self.stopping = True
        for task in self._tasks:
            task.cancel()

    async def join(self) -> None:
        """Wait for every worker, those started meanwhile too; re-raise the first unexpected
        error of any."""
        while pending := [task for task in self._tasks if not task.done()]:
            await asyncio.wait(pending)
        for task in self._tasks:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error


def _ended_cleanly(task: asyncio.Task[None]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None
