"""The aiohttp transport: what the lean one does not send (TLS, URL credentials, streams).

aiohttp is imported and its pool opened on the first request that needs it, in an empty
context (its timers never carry a span): a process whose exchanges are all plain ``http://``
(the driver, the servers) never pays its import (about 0.2 s of CPU at start-up).
``ROLLGYM_HTTP_CLIENT=aiohttp`` sends everything through here (:mod:`rollgym.http.chooser`).

The keep-alive race (:mod:`rollgym.http.lean_transport`'s module doc) is met the same way
here: a request whose send died on a *reused* pooled connection before its answer started is
sent once more through a second session that never pools. aiohttp does not say whether a
connection was reused, so :func:`reuse_aware_connector` tells the sending task through a
context variable; the OpenAI SDK's shared pool (:mod:`rollgym.servers.sdk_pool`) uses the same
connector and tests.
"""

from __future__ import annotations

import contextvars
import functools
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rollgym.http.limits import REDIRECT_STATUSES, read_bounded
from rollgym.http.transport import Answer, Exchange, PoolMetrics, Request, SendFailed
from rollgym.http.transport import note_queue_wait as _note_queue_wait
from rollgym.telemetry.groups import gate

if TYPE_CHECKING:
    import aiohttp

#: Whether the connection of the request being sent in this task came from the pool.
_reused: ContextVar[bool] = ContextVar("rollgym_connection_reused", default=False)


@functools.cache
def reuse_aware_connector() -> type[aiohttp.TCPConnector]:
    """The TCP connector that tells the sending task whether its connection was reused,
    defined once aiohttp is imported; this transport's, and the OpenAI SDK's shared pool's
    (:mod:`rollgym.servers.sdk_pool`)."""
    import aiohttp

    class _ReuseAwareConnector(aiohttp.TCPConnector):
        """A TCP connector that tells the sending task whether its connection was reused.

        The flag goes through a context variable: ``connect`` runs in the task that sends the
        request, so the transport reads it there when the send fails.
        """

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._used: weakref.WeakSet[Any] = weakref.WeakSet()

        async def connect(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
            if gate.http:
                started = time.perf_counter()
                connection = await super().connect(req, traces, timeout)
                _note_queue_wait(time.perf_counter() - started)
            else:
                connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if protocol in self._used:
                _reused.set(True)
            else:
                _reused.set(False)
                self._used.add(protocol)
            return connection

    return _ReuseAwareConnector


def is_stale_connection(exc: aiohttp.ClientError) -> bool:
    """A send that died on a connection the server had already closed (see the module doc)."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorError):
        return False  # could not connect at all: nothing to do with a pooled connection
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))


def sent_on_reused_connection() -> bool:
    """Whether this task's last request went out on a pooled (reused) connection."""
    return _reused.get()


class AiohttpTransport:
    """:class:`~rollgym.http.transport.Transport` through aiohttp's ``ClientSession``, for any
    URL; also the one that streams (:meth:`stream`). ``limit`` caps open connections (0: no
    cap); ``metrics`` gets aiohttp's connection hooks."""

    def __init__(self, *, limit: int, keepalive_s: float, metrics: PoolMetrics | None) -> None:
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._metrics = metrics
        self._session: aiohttp.ClientSession | None = None
        #: Sends the one resend after a stale pooled connection: never pools, so always fresh.
        self._fresh: aiohttp.ClientSession | None = None
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        #: How many requests were resent on a fresh connection (see the module doc).
        self.resent = 0

    @property
    def opened(self) -> bool:
        """Whether aiohttp's pool was opened (by a request that needed it)."""
        return self._session is not None

    def open(self) -> None:
        """Open the pool now rather than on the first request (it is opened in an empty
        context either way: its timers never carry a span)."""
        self._sessions()

    def _sessions(self) -> aiohttp.ClientSession:
        if self._session is None:
            contextvars.Context().run(self._open)
        assert self._session is not None
        return self._session

    def _open(self) -> None:
        import aiohttp

        pooled = reuse_aware_connector()(
            limit=self._limit,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=self._keepalive_s,
        )
        self._session = self._new_session(pooled)
        self._fresh = self._new_session(aiohttp.TCPConnector(limit=0, force_close=True))

    def _new_session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        import aiohttp

        metrics = self._metrics
        trace_configs = [metrics.trace_config()] if metrics is not None else None
        return aiohttp.ClientSession(connector=connector, trace_configs=trace_configs)

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            import aiohttp

            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    async def send(self, request: Request, exchange: Exchange) -> Answer:
        import aiohttp  # imported by the line below, once: a lookup here

        session = self._sessions()
        try:
            try:
                return await self._once(session, request, exchange)
            except aiohttp.ClientError as exc:
                if not (is_stale_connection(exc) and _reused.get() and self._fresh is not None):
                    raise
            self.resent += 1
            return await self._once(self._fresh, request, exchange)
        except aiohttp.ClientError as exc:
            raise SendFailed(exc, refused=_refused(exc)) from None

    async def _once(
        self, session: aiohttp.ClientSession, request: Request, exchange: Exchange
    ) -> Answer:
        method, url = request.method, request.url
        response = await session.request(
            method,
            url,
            data=request.body,
            headers=request.headers,
            timeout=self._timeout(exchange.timeout),
            trace_request_ctx=exchange.trace_ctx(),
            allow_redirects=False,
        )
        # The answer has started: from here on a failure is never resent (module doc).
        _reused.set(False)
        async with response:
            if response.status in REDIRECT_STATUSES:
                return Answer(response.status, response.headers, b"")
            path = urlsplit(url).path or "/"
            body = await read_bounded(response, exchange.limits, exchange.destination, method, path)
            return Answer(response.status, response.headers, body)

    @asynccontextmanager
    async def stream(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float | None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body`` and yield the open response, to read as it arrives; aiohttp's
        failures, while sending or while the caller reads, are :class:`SendFailed`."""
        import aiohttp

        session = self._sessions()
        try:
            async with session.post(
                url, data=body, headers=headers, timeout=self._timeout(timeout)
            ) as response:
                yield response
        except aiohttp.ClientError as exc:
            raise SendFailed(exc, refused=_refused(exc)) from None

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None


def _refused(exc: aiohttp.ClientError) -> bool:
    """Whether nothing listened at the address (the connection was refused)."""
    import aiohttp

    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
        exc.os_error, ConnectionRefusedError
    )
