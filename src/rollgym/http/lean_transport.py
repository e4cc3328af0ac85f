"""The lean transport: plain ``http://`` requests on :mod:`rollgym.http.lean`'s keep-alive pool.

Why a class of its own: the client above it (:mod:`rollgym.http.client`) no longer knows how
a request travels; this one turns a prepared :class:`~rollgym.http.transport.Request` into
the bytes of one HTTP/1.1 request, sends it on :class:`~rollgym.http.lean.LeanPool` under
the exchange's deadline, resends it once in the keep-alive race, and turns
:mod:`~rollgym.http.lean`'s errors into the seam's.

The keep-alive race: a pooled connection can be closed by the server at the very moment a
request is written on it (its idle timer fired, its FIN still in flight). A request that fails
that way on a *reused* connection, before any byte of its answer, was never handed to the
application (servers close idle connections only between requests), so it is sent once more
on a fresh connection; any other failure is never resent here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from rollgym.http import lean
from rollgym.http.transport import Answer, Exchange, Request, SendFailed


class LeanTransport:
    """:class:`~rollgym.http.transport.Transport` for plain ``http://`` URLs without
    credentials (:meth:`takes`). ``limit`` caps open connections (0: no cap)."""

    def __init__(self, *, limit: int, keepalive_s: float) -> None:
        self._pool = lean.LeanPool(limit=limit, keepalive_s=keepalive_s)
        #: How many requests were resent on a fresh connection (the module doc's race).
        self.resent = 0

    @staticmethod
    def takes(url: str) -> bool:
        """Whether this transport can send ``url`` (plain ``http``, no credentials in it)."""
        return lean.target(url) is not None

    def send(self, request: Request, exchange: Exchange) -> Awaitable[Answer]:
        """The request's bytes made now (a header that would split it raises ``ValueError``
        here, unsent), the exchange awaited by the caller."""
        where = lean.target(request.url)
        if where is None:
            raise ValueError("the lean transport sends plain http:// URLs without credentials")
        data = request.body
        head = lean.request_head(
            request.method, where, request.headers, None if data is None else len(data)
        )
        return self._exchange(where, head if data is None else head + data, exchange)

    async def _exchange(self, where: lean.Target, request: bytes, exchange: Exchange) -> Answer:
        limit = exchange.limits.max_response_bytes
        on_connection = exchange.on_connection if exchange.observed else None
        # A deadline, not ``asyncio.timeout``: one timer for the answer (lean.py's module doc).
        seconds = exchange.timeout
        deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
        pool = self._pool
        try:
            try:
                return await pool.exchange(
                    where, request, limit=limit, on_connection=on_connection, deadline=deadline
                )
            except lean.ServerDisconnected as exc:
                if not exc.reused or exc.answer_started:
                    raise
            self.resent += 1  # the keep-alive race: never read, safe to send again
            return await pool.exchange(
                where,
                request,
                limit=limit,
                fresh=True,
                on_connection=on_connection,
                deadline=deadline,
            )
        except lean.LeanError as exc:
            raise SendFailed(exc, refused=_refused(exc)) from None

    async def close(self) -> None:
        self._pool.close()


def _refused(exc: lean.LeanError) -> bool:
    """Whether nothing listened at the address (the connection was refused)."""
    return isinstance(exc, lean.CannotConnect) and isinstance(exc.os_error, ConnectionRefusedError)
