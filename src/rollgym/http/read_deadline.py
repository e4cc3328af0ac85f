"""One connection's deadline for its request to be whole: the timer both bounded protocols use.

The h11 protocol (:mod:`rollgym.http.bounded_reads`) and the httptools one
(:mod:`rollgym.http.bounded_httptools`) learn at different moments that a request began or
is whole (bytes seen vs parser callbacks); what they do then is the same, and lives here: arm
a timer, disarm it, and close the connection when it fires. So does what they do when a
connection opens and closes (:class:`BoundedConnection`, the base both list before uvicorn's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rollgym.http import REQUEST_READ_TIMEOUT_S
from rollgym.http.disconnect import CancelOnDisconnect

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
            close_too_slow(transport, self._client, self.seconds)


def close_too_slow(transport: asyncio.BaseTransport, client: object, seconds: float) -> None:
    """Close a connection whose request was not whole within ``seconds``, and say so."""
    log.info(
        "closing a connection from %s: its request was not received within %.0f s",
        client,
        seconds,
    )
    transport.close()


class BoundedConnection(CancelOnDisconnect):
    """The connection's side of both bounded protocols: a deadline armed when it opens (a
    silent connection is a slow request too) and disarmed when it is lost, and the handler of
    a request whose connection is lost cancelled (:mod:`rollgym.http.disconnect`).

    List it before uvicorn's protocol (``class P(BoundedConnection, H11Protocol)``), which
    provides ``loop``, ``client`` and ``transport``; each subclass arms and disarms the
    deadline around a request by its own parser's signals. ``read_timeout_s`` is a class
    attribute so a test can shorten it in a subclass.
    """

    read_timeout_s: float = REQUEST_READ_TIMEOUT_S
    loop: asyncio.AbstractEventLoop
    client: tuple[str, int] | None
    transport: asyncio.Transport

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = ReadDeadline(self.loop, self.read_timeout_s)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline.arm(transport, self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.disarm()
        super().connection_lost(exc)
