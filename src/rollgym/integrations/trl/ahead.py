"""Asynchronous collection for TRL: groups collected in the background while the trainer steps.

TRL calls its ``rollout_func`` and waits for it, so collected on demand the engine idles while
the trainer computes its step, and the trainer idles while the engine generates. Here the
Collector runs on its loop thread over an endless stream of rows, ahead of the trainer: whole
groups wait in a queue of one batch (``depth`` groups) while the rollouts of the next are in
flight, and each ``rollout_func`` call takes the groups that are ready. The Collector's
``max_staleness`` bounds how old a sample may be when it is handed over; a group that waited
in the queue past a version swap is checked again when it is taken (:func:`too_old`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
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
        depth: int,
    ) -> None:
        self._collector = collector
        self._rows = _numbered(rows)
        self._size = size
        self._queue: asyncio.Queue[list[Outcome] | None] = asyncio.Queue(maxsize=max(depth, 1))
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
            async for group in self._collector.groups(self._rows, size=self._size):
                await self._queue.put(group)
        except Exception as exc:  # handed to the trainer by take()
            self._error = exc
        await self._queue.put(_END)

    async def take(self, count: int) -> list[list[Outcome]]:
        """The next ``count`` whole groups, waiting for those not yet done."""
        self.start()
        groups = []
        for _ in range(count):
            group = await self._queue.get()
            if group is _END:
                self._queue.put_nowait(_END)  # every later take ends too
                why = f": {self._error}" if self._error is not None else ""
                raise RuntimeError(f"rollgym's background collection ended{why}")
            groups.append(group)
        return groups

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
