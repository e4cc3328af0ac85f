"""One timer per connection for both of its time limits: the request's read deadline and keep-alive.

A rollgym server closes a connection in two cases of waiting: a request that is not whole
``read_timeout_s`` after it began (:mod:`rollgym.http.read_deadline`), and a kept-alive
connection idle for ``keep_alive_s`` after its last answer (uvicorn's keep-alive timer).
uvicorn and :class:`~rollgym.http.read_deadline.ReadDeadline` each start an event-loop timer
and cancel it again for every request (two ``call_later`` and two ``cancel`` a request, about
as much CPU as parsing it). :class:`ConnectionDeadline` keeps one timer and only moves a due
time: setting or clearing a deadline is an attribute write and a clock read. The timer, when
it fires, acts if its deadline has passed, else sleeps again until it; so it never fires
later than the deadline, and it is scheduled at most ``min(read_timeout_s, keep_alive_s)``
ahead, which no later deadline can come before (each is at least that far from its start),
so a deadline set is never a timer moved.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rollgym.http.read_deadline import close_too_slow

#: What the connection is waiting for when its deadline passes.
READING = "reading"  # the rest of a request: close and say so (a slow or stalled client)
IDLE = "idle"  # a next request on a kept-alive connection: close quietly (uvicorn's keep-alive)


@dataclass(slots=True, eq=False)
class ConnectionDeadline:
    """The one deadline a connection has at a time, and the one timer that enforces it."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.BaseTransport
    client: object  # the peer, as the "too slow" log line names it
    read_s: float
    keep_alive_s: float
    #: Loop time the connection is closed at, unless cleared.
    due: float | None = field(default=None, init=False)
    why: str | None = field(default=None, init=False)  # READING or IDLE while due is set
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)

    def reading(self) -> None:
        """A request began: it must be whole within ``read_s``."""
        self._set(READING, self.read_s)

    def idle(self) -> None:
        """An answer went out and nothing is being read: the next request within ``keep_alive_s``."""
        self._set(IDLE, self.keep_alive_s)

    def clear(self) -> None:
        """Nothing to wait for (the request is whole, or data arrived on an idle connection)."""
        self.due = self.why = None

    def close(self) -> None:
        """The connection is gone: stop the timer too."""
        self.due = self.why = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _set(self, why: str, seconds: float) -> None:
        now = self.loop.time()
        self.due, self.why = now + seconds, why
        if self._timer is None:
            self._timer = self.loop.call_at(self._next_wake(self.due, now), self._fired)

    def _next_wake(self, due: float, now: float) -> float:
        return min(due, now + min(self.read_s, self.keep_alive_s))

    def _fired(self) -> None:
        self._timer = None
        due = self.due
        if due is None:
            return  # cleared since: the next deadline set schedules the timer again
        now = self.loop.time()
        if due > now:
            self._timer = self.loop.call_at(self._next_wake(due, now), self._fired)
            return
        why, transport = self.why, self.transport
        self.due = self.why = None
        if transport.is_closing():
            return
        if why == READING:
            close_too_slow(transport, self.client, self.read_s)
        else:
            transport.close()
