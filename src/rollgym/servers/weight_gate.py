"""A model server's weight swap: the calls in flight finish first, the new ones wait for it.

When the trainer hands new weights (``POST /policy_version`` with ``weights``), the server
must not stamp a call with a version whose weights did not make every token of it. So the
swap closes the gate to new calls, waits until the calls already inside have answered
(under the old weights, with the old stamp), loads the weights, takes the new version, and
opens the gate again: a call that arrived meanwhile starts then, under the new weights and
stamped with the new version. One swap at a time; a failed load leaves the old weights and
the old version serving.

A call costs one counter increment on the way in and one decrement on the way out while no
swap is under way (the hot path); only calls that arrive during a swap wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["WeightGate"]


class WeightGate:
    """Calls share it (:meth:`enter` / :meth:`leave`); a swap has it alone (:meth:`swap`)."""

    __slots__ = ("_calls", "_idle", "_open", "_swapping")

    def __init__(self) -> None:
        self._calls = 0
        #: Set while no call is inside (what a swap waits for).
        self._idle: asyncio.Event | None = None
        #: Cleared while a swap is under way (what a new call waits for); None: never swapped.
        self._open: asyncio.Event | None = None
        self._swapping: asyncio.Lock | None = None

    @property
    def calls(self) -> int:
        """How many calls are inside now."""
        return self._calls

    def try_enter(self) -> bool:
        """Let a call in at once if no swap is under way (the hot path: no coroutine)."""
        gate = self._open
        if gate is None or gate.is_set():
            self._calls += 1
            return True
        return False

    async def enter(self) -> None:
        """Let a call in: at once, or once the swap under way is done."""
        gate = self._open
        while gate is not None and not gate.is_set():
            await gate.wait()
            gate = self._open
        self._calls += 1

    def leave(self) -> None:
        """A call has answered (or given up); the last one out wakes a waiting swap."""
        self._calls -= 1
        if self._calls == 0 and self._idle is not None:
            self._idle.set()

    @asynccontextmanager
    async def swap(self) -> AsyncIterator[None]:
        """Inside: no call is in flight and none starts (they wait until the block ends)."""
        if self._swapping is None:
            self._swapping = asyncio.Lock()
        async with self._swapping:
            if self._open is None:
                self._open = asyncio.Event()
            self._open.clear()
            try:
                if self._calls:
                    self._idle = asyncio.Event()
                    while self._calls:
                        await self._idle.wait()
                        self._idle.clear()
                    self._idle = None
                yield
            finally:
                self._idle = None
                self._open.set()

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """One call inside the gate (a non-streamed answer)."""
        await self.enter()
        try:
            yield
        finally:
            self.leave()

    async def held_stream(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``events`` with the call inside the gate until the stream ends or is closed (the
        caller gone); the caller entered already."""
        try:
            async for item in events:
                yield item
        finally:
            self.leave()
