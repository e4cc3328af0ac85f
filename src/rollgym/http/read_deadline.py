"""One connection's deadline for its request to be whole: the timer both bounded protocols use.

The h11 protocol (:mod:`rollgym.http.bounded_reads`) and the httptools one
(:mod:`rollgym.http.bounded_httptools`) learn at different moments that a request began or
is whole (bytes seen vs parser callbacks); what they do then is the same, and lives here: arm
a timer, disarm it, and close the connection when it fires.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("rollgym.http")


class ReadDeadline:
    """Closes a connection whose request is not whole ``seconds`` after :meth:`arm`."""

    __slots__ = ("_client", "_loop", "_timer", "_transport", "seconds")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._loop = loop
        self.seconds = seconds
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._client: object = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, transport: asyncio.BaseTransport, client: object) -> None:
        """Start counting (a connection opened, or a kept-alive one began its next request)."""
        self._transport, self._client = transport, client
        self._timer = self._loop.call_later(self.seconds, self._too_slow)

    def disarm(self) -> None:
        """Stop counting (the request is whole, the answer went out, the connection is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            log.info(
                "closing a connection from %s: its request was not received within %.0f s",
                self._client,
                self.seconds,
            )
            transport.close()
