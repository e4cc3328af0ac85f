"""Asynchronous collection for TRL: groups collected in the background while the trainer steps.

TRL calls its ``rollout_func`` and waits for it, so collected on demand the engine idles while
the trainer computes its step, and the trainer idles while the engine generates. Here the
Collector runs on its loop thread over an endless stream of rows, ahead of the trainer: whole
groups wait in a queue of one batch (``depth`` groups) while the rollouts of the next are in
flight, and each ``rollout_func`` call takes the groups that are ready.

How far ahead is held by credit, not by timing: the rows reach the Collector only as each
``take`` grants them, one batch for the call itself (the first time) and one batch for the
next call. So the rows a call takes were dispatched at most one version before it (the
version the call before it set), whatever the speed of either side: with ``max_staleness``
1, no sample is dropped in steady state. The Collector's ``max_staleness`` bounds how old a
sample is when it is handed over; a group that still waited past another swap is checked
again when it is taken (:func:`too_old`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from rollgym.driver.outcomes import Outcome, RolloutResult

if TYPE_CHECKING:
    from rollgym.driver.collector import Collector

_END = None


class GroupsAhead:
    """The background collection: start it on the Collector's loop, take groups, close it."""

    def __init__(
        self,
        collector: Collector,
        rows: Iterable[Mapping[str, object]],
        *,
        size: int,
    ) -> None:
        self._collector = collector
        self._rows = _numbered(rows)
        self._size = size
        self._queue: asyncio.Queue[list[Outcome] | None] = asyncio.Queue()
        self._credit = asyncio.Semaphore(0)  # rows the Collector may start
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    @property
    def size(self) -> int:
        return self._size

    def start(self) -> None:
        """Begin collecting (call on the Collector's loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async for group in self._collector.groups(self._granted(), size=self._size):
                await self._queue.put(group)
        except Exception as exc:  # handed to the trainer by take()
            self._error = exc
        await self._queue.put(_END)

    async def _granted(self) -> AsyncIterator[dict[str, object]]:
        """The rows, each only once a ``take`` has granted it."""
        for row in self._rows:
            await self._credit.acquire()
            yield row

    async def take(self, count: int) -> list[list[Outcome]]:
        """The next ``count`` whole groups, waiting for those not yet done; grants the rows
        of the next batch (``count`` more) before it waits."""
        if self._task is None:
            self._grant(count)  # this batch's rows: nothing was collected ahead yet
            self.start()
        self._grant(count)
        groups = []
        for _ in range(count):
            group = await self._queue.get()
            if group is _END:
                self._queue.put_nowait(_END)  # every later take ends too
                why = f": {self._error}" if self._error is not None else ""
                raise RuntimeError(f"rollgym's background collection ended{why}")
            groups.append(group)
        return groups

    def _grant(self, count: int) -> None:
        for _ in range(count):
            self._credit.release()

    async def close(self) -> None:
        """Stop collecting: rollouts in flight are cancelled with the stream."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def too_old(outcome: Outcome, step: int, max_staleness: int | None) -> bool:
    """Whether a result's oldest model call is more than ``max_staleness`` versions behind
    ``step`` now that the trainer takes it (it may have waited in the queue past a swap)."""
    if max_staleness is None or not isinstance(outcome, RolloutResult):
        return False
    versions = [v for v in outcome.policy_versions or [] if isinstance(v, int)]
    return bool(versions) and step - min(versions) > max_staleness


def _numbered(rows: Iterable[Mapping[str, object]]) -> Iterator[dict[str, object]]:
    """Each row with a rollout id of its own (``a<n>``; the repeats become ``-r1`` ...)."""
    for index, row in zip(itertools.count(), rows):
        yield {**row, "rollout_id": f"a{index}"}
