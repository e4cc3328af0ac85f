"""The one outgoing HTTP client of every rollgym process, and the one place ``traceparent`` goes out.

Driver → agent, agent → model server, agent → environment, model server → upstream engine:
all of them post through :class:`HttpClient`. That gives telemetry exactly one home for the
HTTP client span, the W3C context injection, and the connection-pool metrics, and gives
errors one translation boundary: aiohttp's exceptions become rollgym's transport errors
(:class:`~rollgym.errors.ConnectError`, :class:`~rollgym.errors.ConnectionRefused`,
:class:`~rollgym.errors.RequestTimeout`), which name the server. An answer with any HTTP
status is returned, not raised: the caller knows what the call was for and classifies both
(the driver into ``DispatchError`` kinds, a rollout's call into a ``ServerCallError``).

Keep-alive: an idle pooled connection can be closed by the server at the very moment a request
is written on it (the server's idle timer fired, its FIN is still in flight). The request then
fails with ``ServerDisconnectedError``/``ClientOSError`` although the server never read it.
Two defences: the pool drops idle connections after :data:`KEEPALIVE_S`, well before rollgym's
own servers close them (:data:`SERVER_KEEPALIVE_S`); and a request that fails that way on a
*reused* connection, before any byte of the answer arrived, is sent once more on a fresh
connection. That resend is safe for POST: a server closes an idle keep-alive connection only
when no request is in progress on it, so the first copy was never handed to the application
(uvicorn and aiohttp both close idle connections only between requests). A failure on a
fresh connection, or after the answer started, is never resent here: the server may have run
the request, and only the driver (with a new attempt id) decides whether to try again.

Replicas: a server launched with several replicas is known by its first replica's URL; the
client sends each request to that URL to the replica with the fewest requests in flight
(:mod:`rollgym.http.replicas`), takes a replica that refuses connections out of rotation at
once, and sends ``pinned`` requests (an environment session's calls) to exactly the replica
they name. The answer says which replica served it (:attr:`HttpResponse.replica`).

Limits (:class:`~rollgym.http.limits.ExchangeLimits`): a body over ``max_request_bytes`` is
refused before it is sent, an answer is read in chunks and refused as soon as it grows past
``max_response_bytes`` (never buffered whole first), and a redirect is followed only to the
same scheme, host and port, a few times at most; each refusal is an
:class:`~rollgym.errors.ExchangeRefused` whose message names the config key or the two hosts.
Credentials in a URL (``http://user:pass@host``) are sent as basic auth by aiohttp and never
appear in a message (:mod:`rollgym.urls`).

Create the client once per process, outside any span (``async with HttpClient() as client``),
so its pool and background tasks never capture a rollout's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypedDict, Unpack
from urllib.parse import urlsplit

import orjson

import rollgym.server_timing as server_timing
from rollgym.errors import ConnectError, ConnectionRefused, RequestTimeout
from rollgym.http import lean
from rollgym.http.limits import REDIRECT_STATUSES, ExchangeLimits, read_bounded, redirect_target
from rollgym.http.replicas import ReplicaSet, ReplicaTable, on_replica, origin
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate
from rollgym.urls import redact_text

if TYPE_CHECKING:  # imported where first used (see _TRANSPORT_ERRORS)
    import aiohttp

_JSON_HEADERS = {"Content-Type": "application/json"}
#: How much of a non-JSON answer is kept for error messages.
_TEXT_SNIPPET = 500
#: Seconds an idle pooled connection is kept. Shorter than every rollgym server's keep-alive
#: (:data:`SERVER_KEEPALIVE_S`), so the pool gives a connection up before the server does.
KEEPALIVE_S = 30.0
#: Seconds rollgym's servers keep an idle connection open: well above :data:`KEEPALIVE_S`.
SERVER_KEEPALIVE_S = 75

#: Whether the connection of the request being sent in this task came from the pool.
_reused: ContextVar[bool] = ContextVar("rollgym_connection_reused", default=False)


#: What a failed exchange may raise below HTTP: the lean client's errors, and aiohttp's once
#: a client opened its aiohttp pool (:meth:`HttpClient._open_aiohttp`; before that nothing
#: can raise them). aiohttp is imported only there and where its errors are looked at: only
#: TLS, URL credentials and streamed answers go through it, so a process whose exchanges
#: are all plain ``http://`` (the driver, the servers) never pays its import (about 0.2 s
#: of CPU at start-up).
_TRANSPORT_ERRORS: tuple[type[aiohttp.ClientError] | type[lean.LeanError], ...] = (lean.LeanError,)


@functools.cache
def reuse_aware_connector() -> type[aiohttp.TCPConnector]:
    """The TCP connector that tells the sending task whether its connection was reused,
    defined once aiohttp is imported; the client's, and the OpenAI SDK's shared pool's
    (:mod:`rollgym.servers.sdk_pool`)."""
    import aiohttp

    class _ReuseAwareConnector(aiohttp.TCPConnector):
        """A TCP connector that tells the sending task whether its connection was reused.

        The flag goes through a context variable: ``connect`` runs in the task that sends the
        request, so :meth:`HttpClient._send` reads it there when the send fails.
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


@functools.cache
def _current_span() -> Any:
    """``trace.get_current_span``, imported once (an import statement per request costs)."""
    from opentelemetry import trace

    return trace.get_current_span


def _note_queue_wait(seconds: float, span: Any = None) -> None:
    """The wait for a connection (pooled or new) on the request's client span (``span``, else
    the one current in this task), so a trace alone says how long each request queued."""
    try:
        if span is None:
            span = _current_span()()
        if span.is_recording():
            span.set_attribute(names.HTTP_CLIENT_QUEUE_DURATION, seconds)
    except Exception:  # telemetry never fails the request it observes
        return


def _stale_connection(exc: aiohttp.ClientError) -> bool:
    """A send that died on a connection the server had already closed (see the module doc)."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorError):
        return False  # could not connect at all: nothing to do with a pooled connection
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))


#: The same stale-connection resend, for the OpenAI SDK's shared pool
#: (:mod:`rollgym.servers.sdk_pool`): its connector (:func:`reuse_aware_connector`), and the
#: two tests of a failed send.
is_stale_connection = _stale_connection


def sent_on_reused_connection() -> bool:
    """Whether this task's last request went out on a pooled (reused) connection."""
    return _reused.get()


class HttpResponse(NamedTuple):
    """A finished exchange: status, parsed JSON (None when the body was not JSON), raw text snippet.

    A named tuple: one is built per request, and tuples are the cheapest immutable record.
    """

    status: int
    data: Any
    text: str
    #: The trace the request was sent in (32 hex digits), or None when nothing was injected.
    trace_id: str | None = None
    #: The replica (``scheme://host:port``) that answered, when the server has replicas.
    replica: str | None = None
    #: The answer's headers (names case-insensitive), for a caller that passes some on.
    headers: Mapping[str, str] | None = None


class PoolMetrics(Protocol):
    """What the client records about its pool (``telemetry.metrics.HttpClientMetrics``)."""

    def request_started(self, destination: str) -> None: ...

    def request_finished(self, destination: str) -> None: ...

    def trace_config(self) -> aiohttp.TraceConfig: ...

    def connection_wait(self, destination: str, seconds: float) -> None:
        """The wait for a connection of a request sent outside aiohttp (:mod:`.lean`)."""


class RequestOptions(TypedDict, total=False):
    """The keyword options of :meth:`HttpClient.post_json` and :meth:`HttpClient.request_json`.

    ``timeout``: seconds for the whole exchange (None: no limit); ``headers``: sent beside
    ``Content-Type``; ``route``: the URL template for the span name; ``pinned``: send to
    exactly the URL's replica.
    """

    timeout: float | None
    headers: Mapping[str, str] | None
    route: str | None
    pinned: bool


class _Call(NamedTuple):
    """One call of :meth:`HttpClient.request_json`, as the layers below it pass it on."""

    method: str
    destination: str
    url: str
    body: object
    timeout: float | None
    headers: Mapping[str, str] | None
    route: str | None


class _Hop(NamedTuple):
    """One request as it goes out (a redirect makes the next hop)."""

    method: str
    url: str
    data: bytes | None
    headers: dict[str, str]


#: An answer of one hop: status, headers, body (empty for a redirect).
_Answer = tuple[int, Mapping[str, str], bytes]


class _Exchange:
    """What every hop of one request shares: its server, time limit and observers."""

    __slots__ = ("destination", "timeout", "metrics", "started", "observed", "span")

    def __init__(
        self,
        destination: str,
        timeout: float | None,
        metrics: PoolMetrics | None,
        span: Any = None,
    ):
        self.destination = destination
        self.timeout = timeout
        self.metrics = metrics
        #: The request's client span, handed down so the queue wait lands on it without a
        #: current-span lookup through the API per request; None: look it up (aiohttp path).
        self.span = span
        self.started = time.monotonic() if metrics is not None else 0.0
        #: Whether anyone records the wait for a connection (pool metrics, the client span).
        self.observed = metrics is not None or gate.http

    def trace_ctx(self) -> dict[str, object] | None:
        """aiohttp's ``trace_request_ctx`` for the pool metrics' hooks."""
        if self.metrics is None:
            return None
        return {"destination": self.destination, "started": self.started}

    def on_connection(self, seconds: float) -> None:
        """A lean exchange's wait for its connection, where aiohttp's hooks would record it."""
        if self.span is not None:
            _note_queue_wait(seconds, self.span)
        elif gate.http:
            _note_queue_wait(seconds)
        if self.metrics is not None:
            self.metrics.connection_wait(self.destination, seconds)


class HttpClient:
    """A pooled aiohttp client that speaks JSON and knows which server it talks to.

    ``limit`` caps open connections (0 = no cap). ``metrics`` is the connection-pool recorder
    set up by telemetry, or None. ``replicas``: ``{server: [replica URLs]}`` of the servers
    launched with several replicas (their first URL is the one callers use).
    """

    def __init__(
        self,
        *,
        limit: int = 0,
        metrics: PoolMetrics | None = None,
        replicas: Mapping[str, list[str]] | None = None,
        limits: ExchangeLimits | None = None,
    ) -> None:
        self._limit = limit
        self.limits = limits or ExchangeLimits()
        self._metrics = metrics
        self.replicas = ReplicaTable(replicas)
        self._session: aiohttp.ClientSession | None = None
        #: Sends the one resend after a stale pooled connection: never pools, so always fresh.
        self._fresh: aiohttp.ClientSession | None = None
        #: How many requests were resent on a fresh connection (see the module doc).
        self.resent = 0
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        #: Plain ``http://`` JSON exchanges go through this pool, the rest through aiohttp.
        self._lean: lean.LeanPool | None = None
        self._started = False

    async def __aenter__(self) -> HttpClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the pool. Call it outside any span."""
        if not self._started:
            self._started = True
            if lean.enabled():
                self._lean = lean.LeanPool(limit=self._limit, keepalive_s=KEEPALIVE_S)
            else:
                self._aiohttp_sessions()

    def _aiohttp_sessions(self) -> aiohttp.ClientSession:
        """The aiohttp pool, opened on the first exchange the lean pool cannot send (TLS,
        URL credentials, a stream), in an empty context: its timers never carry a span."""
        if self._session is None:
            contextvars.Context().run(self._open_aiohttp)
        assert self._session is not None
        return self._session

    def _open_aiohttp(self) -> None:
        global _TRANSPORT_ERRORS
        import aiohttp

        _TRANSPORT_ERRORS = (aiohttp.ClientError, lean.LeanError)
        pooled = reuse_aware_connector()(
            limit=self._limit,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=KEEPALIVE_S,
        )
        self._session = self._new_session(pooled)
        self._fresh = self._new_session(aiohttp.TCPConnector(limit=0, force_close=True))

    def _new_session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        trace_configs = [self._metrics.trace_config()] if self._metrics is not None else None
        import aiohttp

        return aiohttp.ClientSession(connector=connector, trace_configs=trace_configs)

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        if self._lean is not None:
            self._lean.close()
        self._session = self._fresh = self._lean = None
        self._started = False

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            import aiohttp

            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    def post_json(
        self, destination: str, url: str, body: object, **options: Unpack[RequestOptions]
    ) -> Awaitable[HttpResponse]:
        """POST ``body`` as JSON to ``url`` on server ``destination``; await the result.

        ``route`` is the URL template for the span name (``/v1/chat/completions``), so a
        rollout-scoped URL never makes span names high-cardinality. Raises
        :class:`~rollgym.errors.ConnectError` (``ConnectionRefused`` when nothing listens) or
        :class:`~rollgym.errors.RequestTimeout`; any HTTP status is returned, the caller
        decides what it means. ``pinned``: send to exactly ``url``'s
        replica, never balanced away (session affinity).
        """
        return self.request_json("POST", destination, url, body, **options)

    def get_json(
        self, destination: str, url: str, *, timeout: float | None = None, route: str | None = None
    ) -> Awaitable[HttpResponse]:
        return self.request_json("GET", destination, url, None, timeout=timeout, route=route)

    def request_json(
        self,
        method: str,
        destination: str,
        url: str,
        body: object,
        **options: Unpack[RequestOptions],
    ) -> Awaitable[HttpResponse]:
        """The single send, wrapped in the HTTP client span when the ``http`` group is on.

        A plain function returning the coroutine to await, not a coroutine itself: the hot
        path (every rollout posts through here) pays for one coroutine frame, not three. The
        context is read now, in the caller's task, which is where ``traceparent`` belongs.
        """
        call = _Call(
            method,
            destination,
            url,
            body,
            options.get("timeout"),
            options.get("headers"),
            options.get("route"),
        )
        target = None
        if self.replicas:
            pinned = options.get("pinned", False)
            target = self.replicas.containing(url) if pinned else self.replicas.for_url(url)
        if target is None:
            return self._single(call)
        replica = origin(url) if pinned else target.pick()
        sent = self._single(call._replace(url=on_replica(url, origin(url), replica)))
        return self._on_replica(sent, target, replica)

    async def _on_replica(
        self, sent: Awaitable[HttpResponse], target: ReplicaSet, replica: str
    ) -> HttpResponse:
        """Count ``sent`` against ``replica`` while in flight; a refusal takes it out."""
        with target.in_flight(replica):
            response = await sent
        return response._replace(replica=replica)

    def _single(self, call: _Call) -> Awaitable[HttpResponse]:
        if gate.http:
            return self._traced(call)
        if call.headers or gate.tracing:
            sent_headers = _with_json(call.headers)
            trace_id = _inject(sent_headers) if gate.tracing else None
        else:
            sent_headers, trace_id = _JSON_HEADERS, None  # never mutated on the way out
        return self._send(call, sent_headers, trace_id)

    async def _traced(self, call: _Call) -> HttpResponse:
        sent_headers = _with_json(call.headers)
        with _span_helpers()[0](call.method, call.destination, call.url, call.route) as span:
            trace_id = _inject(sent_headers, span)
            response = await self._send(call, sent_headers, trace_id, span)
            _record_status(span, response.status)
            return response

    async def _send(
        self, call: _Call, headers: dict[str, str], trace_id: str | None, span: Any = None
    ) -> HttpResponse:
        if not self._started:
            raise RuntimeError("HttpClient used before start(); create it at process start-up")
        method, destination, url, body, timeout, _, _ = call
        data = orjson.dumps(body) if body is not None else None
        if data is not None:
            self.limits.check_request(destination, method, url, len(data))
        metrics = self._metrics
        if metrics is not None:
            metrics.request_started(destination)
        exchange = _Exchange(destination, timeout, metrics, span)
        try:
            status, raw, answer_headers = await self._exchange(
                exchange, _Hop(method, url, data, headers)
            )
        except TimeoutError:
            raise _timed_out(destination, method, url, timeout) from None
        except _TRANSPORT_ERRORS as exc:
            raise _unreachable(destination, method, url, exc) from None
        except lean.AnswerTooLarge as exc:
            raise self.limits.too_large(destination, method, _path(url), exc.size) from None
        finally:
            if metrics is not None:
                metrics.request_finished(destination)
        # Seconds the server reports spending for us (engine, sandbox) join the open
        # request scope, where they reach the rollout's usage (rollgym/server_timing.py).
        server_timing.note_header(answer_headers.get(server_timing.HEADER))
        try:
            parsed = orjson.loads(raw) if raw else None
            text = ""
        except orjson.JSONDecodeError:
            parsed = None
            text = raw[:_TEXT_SNIPPET].decode("utf-8", "replace")
        return HttpResponse(status, parsed, text, trace_id, None, answer_headers)

    async def _exchange(
        self, exchange: _Exchange, hop: _Hop
    ) -> tuple[int, bytes, Mapping[str, str]]:
        """One request (and its same-host redirects): the answer's status, headers and body
        (read within ``max_response_bytes``)."""
        redirects = 0
        while True:
            status, answer_headers, body = await self._hop(exchange, hop)
            target = redirect_target(exchange.destination, status, hop.url, answer_headers)
            if target is None:
                return status, body, answer_headers
            redirects += 1
            self.limits.check_redirect(exchange.destination, status, hop.url, target, redirects)
            if status == 303 or (status in (301, 302) and hop.method == "POST"):
                hop = _Hop("GET", target, None, hop.headers)  # what browsers and aiohttp do
            else:
                hop = hop._replace(url=target)

    def _hop(self, exchange: _Exchange, hop: _Hop) -> Awaitable[_Answer]:
        """One request, no redirect followed: through :mod:`.lean` where it can go, else aiohttp.
        Every URL a request goes to passes here (the first and each redirect's), so this is
        where one with a control character is refused."""
        self.limits.check_url(exchange.destination, hop.method, hop.url)
        pool = self._lean
        where = lean.target(hop.url) if pool is not None else None
        if pool is None or where is None:
            return self._aiohttp_hop(exchange, hop)
        data = hop.data
        request = lean.request_head(
            hop.method, where, hop.headers, None if data is None else len(data)
        )
        if data is not None:
            request += data
        return self._lean_hop(pool, exchange, where, request)

    async def _lean_hop(
        self, pool: lean.LeanPool, exchange: _Exchange, where: lean.Target, request: bytes
    ) -> _Answer:
        limit = self.limits.max_response_bytes
        on_connection = exchange.on_connection if exchange.observed else None
        # A deadline, not ``asyncio.timeout``: one timer for the answer (lean.py's module doc).
        seconds = exchange.timeout
        deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
        try:
            answer = await pool.exchange(
                where, request, limit=limit, on_connection=on_connection, deadline=deadline
            )
        except lean.ServerDisconnected as exc:
            if not exc.reused or exc.answer_started:
                raise
            self.resent += 1  # the keep-alive race: never read, safe to send again
            answer = await pool.exchange(
                where,
                request,
                limit=limit,
                fresh=True,
                on_connection=on_connection,
                deadline=deadline,
            )
        return answer

    async def _aiohttp_hop(self, exchange: _Exchange, hop: _Hop) -> _Answer:
        import aiohttp  # imported by the line below, once: a lookup here

        session = self._aiohttp_sessions()
        try:
            return await self._aiohttp_once(session, exchange, hop)
        except aiohttp.ClientError as exc:
            if not (_stale_connection(exc) and _reused.get() and self._fresh is not None):
                raise
            self.resent += 1
            return await self._aiohttp_once(self._fresh, exchange, hop)

    async def _aiohttp_once(
        self, session: aiohttp.ClientSession, exchange: _Exchange, hop: _Hop
    ) -> _Answer:
        response = await session.request(
            hop.method,
            hop.url,
            data=hop.data,
            headers=hop.headers,
            timeout=self._timeout(exchange.timeout),
            trace_request_ctx=exchange.trace_ctx(),
            allow_redirects=False,
        )
        # The answer has started: from here on a failure is never resent (module doc).
        _reused.set(False)
        async with response:
            if response.status in REDIRECT_STATUSES:
                return response.status, response.headers, b""
            path = _path(hop.url)
            body = await read_bounded(response, self.limits, exchange.destination, hop.method, path)
            return response.status, response.headers, body

    @asynccontextmanager
    async def stream(
        self,
        destination: str,
        url: str,
        body: Any,
        *,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        route: str | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body`` as JSON and yield the open response, to read as it arrives (SSE).

        The same context, span, error translation and replica choice as :meth:`request_json`;
        the span ends when the block ends, so it covers the whole stream, and a stream counts
        as outstanding on its replica until then.
        """
        target = self.replicas.for_url(url) if self.replicas else None
        if target is None:
            async with self._stream_one(destination, url, body, timeout, headers, route) as answer:
                yield answer
            return
        replica = target.pick()
        with target.in_flight(replica):
            async with self._stream_one(
                destination, on_replica(url, origin(url), replica), body, timeout, headers, route
            ) as answer:
                yield answer

    @asynccontextmanager
    async def _stream_one(
        self,
        destination: str,
        url: str,
        body: Any,
        timeout: float | None,
        headers: Mapping[str, str] | None,
        route: str | None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        if not self._started:
            raise RuntimeError("HttpClient used before start(); create it at process start-up")
        session = self._aiohttp_sessions()
        sent_headers = _with_json(headers)
        span_scope: AbstractContextManager[Any] = nullcontext()
        if gate.http:
            from rollgym.telemetry.spans import http_client_span

            span_scope = http_client_span("POST", destination, url, route)
        with span_scope as span:
            if gate.tracing:
                _inject(sent_headers, span)
            try:
                async with session.post(
                    url,
                    data=orjson.dumps(body),
                    headers=sent_headers,
                    timeout=self._timeout(timeout),
                ) as response:
                    if span is not None:
                        _record_status(span, response.status)
                    yield response
            except TimeoutError:
                raise _timed_out(destination, "POST", url, timeout) from None
            except _TRANSPORT_ERRORS as exc:  # aiohttp's, once the session is open
                raise _unreachable(destination, "POST", url, exc) from None


def _timed_out(destination: str, method: str, url: str, timeout: float | None) -> RequestTimeout:
    return RequestTimeout(
        f"no answer from {destination!r} within {timeout}s ({method} {_path(url)})",
        server=destination,
    )


def _unreachable(
    destination: str, method: str, url: str, exc: aiohttp.ClientError | lean.LeanError
) -> ConnectError:
    """aiohttp's or the lean client's failure as rollgym's: ``ConnectionRefused`` when
    nothing listened."""
    error = ConnectionRefused if _refused(exc) else ConnectError
    return error(
        redact_text(
            f"cannot reach {destination!r} ({method} {_path(url)}): {type(exc).__name__}: {exc}"
        ),
        server=destination,
    )


def _refused(exc: aiohttp.ClientError | lean.LeanError) -> bool:
    """Whether nothing listened at the address (the connection was refused)."""
    if isinstance(exc, lean.LeanError):  # never imports aiohttp for the lean client's error
        return isinstance(exc, lean.CannotConnect) and isinstance(
            exc.os_error, ConnectionRefusedError
        )
    import aiohttp

    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
        exc.os_error, ConnectionRefusedError
    )


def _with_json(headers: Mapping[str, str] | None) -> dict[str, str]:
    """A fresh header dict (``traceparent`` may be written into it): JSON plus the caller's."""
    return {**_JSON_HEADERS, **headers} if headers else dict(_JSON_HEADERS)


@functools.cache
def _span_helpers() -> tuple[Any, Any, Any]:
    """(``http_client_span``, ``inject_span``, ``inject_current``), imported on the first traced
    request and never with tracing off. Cached: an import statement in the function cost
    1-2.5 µs per call on the traced path (measured), which every rollout takes twice."""
    from rollgym.telemetry.context import inject_current, inject_span
    from rollgym.telemetry.spans import http_client_span

    return http_client_span, inject_span, inject_current


def _inject(headers: dict[str, str], span: Any = None) -> str | None:
    """Write ``traceparent``/``tracestate`` for the current context; return its trace id.

    ``span`` is the client span the caller just made current, when it has one: its context is
    what went out, so it is not looked up a second time.
    """
    helpers = _span_helpers()
    if span is not None:
        injected: str | None = helpers[1](headers, span.get_span_context())
        return injected
    current: str | None = helpers[2](headers)
    return current


def _record_status(span: Any, status: int) -> None:
    """``http.response.status_code`` (and error status for 5xx): one attribute call per span."""
    if status < 500:
        span.set_attribute(names.HTTP_RESPONSE_STATUS_CODE, status)
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes({names.HTTP_RESPONSE_STATUS_CODE: status, names.ERROR_TYPE: str(status)})
    span.set_status(Status(StatusCode.ERROR))


def _path(url: str) -> str:
    return urlsplit(url).path or "/"
