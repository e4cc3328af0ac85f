"""An event loop on a thread of its own, for trainers whose training loop is synchronous.

rollgym's :class:`~rollgym.Collector` lives in an event loop; TRL (and most trainers) call
their rollout hook from plain synchronous code. One loop thread per integration holds the
Collector open for the whole training run (its connection pool, its policy clock), and the
trainer's thread hands it one coroutine at a time and waits for the answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TypeVar

from rollgym.event_loop import loop_factory

T = TypeVar("T")


class LoopThread:
    """A running event loop on a daemon thread; :meth:`call` runs a coroutine there."""

    def __init__(self, name: str = "rollgym-loop") -> None:
        factory = loop_factory()
        self._loop = factory() if factory is not None else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coroutine: Coroutine[object, object, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (its exception is raised
        here). If the wait is interrupted (Ctrl-C, ``timeout``), the coroutine is cancelled."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop and wait for its thread (what is still scheduled is dropped)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()
