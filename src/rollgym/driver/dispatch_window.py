"""The dispatch window: how many attempts one server is sent at once, found by its answers.

``run.concurrency`` says how many rollouts the driver holds in flight; it does not say how
many ``POST /run`` the servers can serve at once. On a machine whose cores are saturated,
sending all of them together turns the servers into processor sharing: every request
progresses a little, none finishes, and when the whole batch's CPU work exceeds
``timeout_s`` every attempt times out at about the same instant (measured: 5,000 of 5,000 at
``timeout_s`` 60, each rollout a few milliseconds of work).

So each dispatch server has a window, like TCP's congestion window but driven by how long
the answers take against the attempt's own time limit:

* an attempt answered within a quarter of ``timeout_s`` opens the window by one (the window
  doubles per round trip, so a healthy server reaches ``concurrency`` within a few);
* one answered within half of it opens the window by one per window's worth of answers;
* one that took longer, or timed out, halves the window (once per round trip: only an
  attempt sent after the last halving may halve it again), never below ``FLOOR``.

An attempt waits for the window *before* it is sent, and its time limit starts when it is
sent: the clock measures the rollout, not the wait in the driver's own queue. The wait is
recorded on the dispatch span as ``gym.rollout.admission_wait`` (``traces profile`` shows it
as ``admission_wait``). Waiters are served first in, first out.

A window that closes is said, once per server, as a warning naming the answer that closed it
and what to change when rollouts legitimately take that long (a window held at its floor by
rollouts near ``timeout_s`` would otherwise only look like a slow run), and every window is in
``progress.json`` (:meth:`DispatchWindows.view`) and the progress line (attempts waiting).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypedDict

_log = logging.getLogger(__name__)

#: The window never closes below this many attempts (or ``concurrency`` if smaller).
FLOOR = 16
#: The window a server starts with (or ``concurrency`` if smaller): a run of up to this many in
#: flight sends its first wave as it always did; 5,000 on two saturated cores send this many
#: first and none times out (bench/saturation.py).
INITIAL = 1024
#: Per answer, the slowest recent answer's seconds shrink by this factor (about 500 fast
#: answers forget one slow one).
SLOWEST_DECAY = 0.99


class WindowView(TypedDict):
    """One server's window in ``progress.json``: its size, attempts sent and unanswered, and
    attempts waiting unsent for room."""

    window: int
    sent: int
    waiting: int


#: Called when a window is halved: (the window, the answer's seconds, whether it timed out).
OnHalved = Callable[["DispatchWindow", float, bool], None]


class DispatchWindow:
    """The window of one server: :meth:`acquire` before sending, :meth:`release` after."""

    __slots__ = (
        "_waiters",
        "_floor",
        "_ceiling",
        "_fast_s",
        "_slow_s",
        "_halved_at",
        "_on_halved",
        "window",
        "outstanding",
        "answered",
        "slowest_s",
    )

    def __init__(
        self,
        ceiling: int,
        timeout_s: float,
        initial: int = INITIAL,
        on_halved: OnHalved | None = None,
    ) -> None:
        self._on_halved = on_halved
        self._ceiling = ceiling
        self._floor = min(FLOOR, ceiling)
        self._fast_s = timeout_s / 4
        self._slow_s = timeout_s / 2
        self._halved_at = float("-inf")
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        #: The current window (fractional: the additive step adds 1/window).
        self.window = float(min(max(initial, self._floor), ceiling))
        #: Attempts sent and not yet answered.
        self.outstanding = 0
        #: Attempts answered (a timeout is not an answer), and the slowest recent answer's
        #: seconds, decaying: what :mod:`rollgym.driver.stall_relief` judges silence by.
        self.answered = 0
        self.slowest_s = 0.0

    def _has_room(self) -> bool:
        return self.outstanding < int(self.window)

    async def acquire(self) -> float:
        """Wait for room in the window; the seconds waited (0.0 on the fast path)."""
        if not self._waiters and self._has_room():
            self.outstanding += 1
            return 0.0
        started = time.perf_counter()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back()  # granted, then cancelled before use: pass the slot on
            else:
                with contextlib.suppress(ValueError):  # else already dropped by _give_back
                    self._waiters.remove(waiter)
            raise
        return time.perf_counter() - started

    def release(self, sent_at: float, duration_s: float, timed_out: bool) -> None:
        """An attempt sent at ``sent_at`` (perf_counter) ended after ``duration_s`` seconds."""
        if not timed_out:
            self.answered += 1
            self.slowest_s = max(duration_s, self.slowest_s * SLOWEST_DECAY)
        if timed_out or duration_s > self._slow_s:
            if sent_at >= self._halved_at:
                self.window = max(float(self._floor), self.window / 2)
                self._halved_at = time.perf_counter()
                if self._on_halved is not None:
                    self._on_halved(self, duration_s, timed_out)
        elif duration_s <= self._fast_s:
            self.window = min(float(self._ceiling), self.window + 1.0)
        else:
            self.window = min(float(self._ceiling), self.window + 1.0 / self.window)
        self._give_back()

    def view(self) -> WindowView:
        """Its size, attempts sent and unanswered, and attempts waiting to be sent."""
        waiting = sum(1 for waiter in self._waiters if not waiter.done())
        return {"window": int(self.window), "sent": self.outstanding, "waiting": waiting}

    def _give_back(self) -> None:
        """One slot freed: hand slots to waiters while the window has room."""
        self.outstanding -= 1
        waiters = self._waiters
        while waiters and self._has_room():
            waiter = waiters.popleft()
            if waiter.done():  # cancelled while queued: skipped, its task sees it gone
                continue
            self.outstanding += 1
            waiter.set_result(None)


class DispatchWindows:
    """One :class:`DispatchWindow` per dispatch server, made on first use."""

    __slots__ = ("_ceiling", "_timeout_s", "_windows", "_warned", "notices")

    def __init__(self, ceiling: int, timeout_s: float) -> None:
        self._ceiling = ceiling
        self._timeout_s = timeout_s
        self._windows: dict[str, DispatchWindow] = {}
        self._warned: set[str] = set()
        #: What was said of closing windows, one line per server (the run's summary warnings).
        self.notices: list[str] = []

    def of(self, server: str) -> DispatchWindow:
        window = self._windows.get(server)
        if window is None:
            window = self._windows[server] = DispatchWindow(
                self._ceiling,
                self._timeout_s,
                INITIAL,
                on_halved=lambda window, seconds, timed_out: self._halved(
                    server, window, seconds, timed_out
                ),
            )
        return window

    def windows(self) -> dict[str, DispatchWindow]:
        """Every server's window, by server name (read, never changed, by the caller)."""
        return self._windows

    def view(self) -> dict[str, WindowView]:
        """Every server's window now (``progress.json``'s ``dispatch_windows``)."""
        return {server: window.view() for server, window in self._windows.items()}

    def _halved(self, server: str, window: DispatchWindow, seconds: float, timed_out: bool) -> None:
        """The first halving of a server's window, said once as a warning."""
        if server in self._warned:
            return
        self._warned.add(server)
        limit = f"run.timeout_s ({self._timeout_s:g} s)"
        why = (
            f"an attempt timed out after {limit}"
            if timed_out
            else f"an attempt took {seconds:.1f} s, over half of {limit}"
        )
        notice = (
            f"dispatch to {server!r}: {why}, so its dispatch window is halved to "
            f"{int(window.window)} attempts at once; the rest wait unsent (dispatch_windows in "
            "progress.json). If its rollouts legitimately take this long, raise run.timeout_s "
            "or set run.adaptive_window: false"
        )
        self.notices.append(notice)
        _log.warning("%s", notice)
