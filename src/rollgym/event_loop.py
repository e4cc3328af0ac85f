"""Which event loop every rollgym process runs: uvloop when installed, else asyncio's.

uvloop (the ``fast`` extra) roughly halves the per-request cost of HTTP in aiohttp and uvicorn.
One function decides for the CLI commands, the server processes and Ray actors alike; it
imports nothing heavy, so ``rollgym --help`` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For ``asyncio.Runner(loop_factory=...)``: uvloop's loop, or None for asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[object, object, T]) -> T:
    """``asyncio.run`` on the loop :func:`loop_factory` picks (what the benchmarks use)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


async def cancel_and_wait(task: asyncio.Task[object] | None) -> None:
    """Cancel a background task (a watcher, a sweeper) and wait until it has stopped.

    Its cancellation is the expected end, so it is swallowed; anything else it raised on the
    way out propagates. None (never started) does nothing.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
