"""The one outgoing HTTP client of every rollgym process, and the one place ``traceparent`` goes out.

Driver → agent, agent → model server, agent → environment, model server → upstream engine:
all of them post through :class:`HttpClient`. That gives telemetry exactly one home for the
HTTP client span, the W3C context injection, and the connection-pool metrics, and gives
errors one translation boundary: a transport's failures become rollgym's transport errors
(:class:`~rollgym.errors.ConnectError`, :class:`~rollgym.errors.ConnectionRefused`,
:class:`~rollgym.errors.RequestTimeout`), which name the server. An answer with any HTTP
status is returned, not raised: the caller knows what the call was for and classifies both
(the driver into ``DispatchError`` kinds, a rollout's call into a ``ServerCallError``).

Transports: this class does what is common to every request once; how a request travels is a
transport's (:mod:`rollgym.http.transport`, the seam), chosen per URL by
:mod:`rollgym.http.chooser`: plain ``http://`` through the lean transport
(:mod:`rollgym.http.lean_transport`), TLS, URL credentials and streams through aiohttp's
(:mod:`rollgym.http.aiohttp_transport`), or everything through one given to the client
(``transport=``: an in-memory one, :mod:`rollgym.http.memory`, needs no socket).

Keep-alive: an idle pooled connection can be closed by the server at the very moment a request
is written on it. Two defences: the pools drop idle connections after :data:`KEEPALIVE_S`,
well before rollgym's own servers close them (:data:`SERVER_KEEPALIVE_S`); and each
transport sends once more, on a fresh connection, a request that failed that way on a
*reused* connection before any byte of the answer arrived (the server never read it).
A failure on a fresh connection, or after the answer started, is never resent here: the
server may have run the request, and only the driver (with a new attempt id) decides whether
to try again.

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

import functools
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack
from urllib.parse import urlsplit

import orjson

import rollgym.server_timing as server_timing
from rollgym.errors import ConnectError, ConnectionRefused, RequestTimeout
from rollgym.http.aiohttp_transport import (
    is_stale_connection as is_stale_connection,
)
from rollgym.http.aiohttp_transport import (
    reuse_aware_connector as reuse_aware_connector,
)
from rollgym.http.aiohttp_transport import (
    sent_on_reused_connection as sent_on_reused_connection,
)
from rollgym.http.chooser import TransportChooser
from rollgym.http.limits import ExchangeLimits, redirect_target
from rollgym.http.replicas import ReplicaSet, ReplicaTable, on_replica, origin
from rollgym.http.transport import (
    Answer,
    AnswerTooLarge,
    Exchange,
    Request,
    SendFailed,
    Transport,
)
from rollgym.http.transport import PoolMetrics as PoolMetrics
from rollgym.http.transport import note_queue_wait as _note_queue_wait  # noqa: F401 (bench)
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate
from rollgym.urls import redact_text

if TYPE_CHECKING:  # imported by its transport, on first need
    import aiohttp

_JSON_HEADERS = {"Content-Type": "application/json"}
#: How much of a non-JSON answer is kept for error messages.
_TEXT_SNIPPET = 500
#: Seconds an idle pooled connection is kept. Shorter than every rollgym server's keep-alive
#: (:data:`SERVER_KEEPALIVE_S`), so the pool gives a connection up before the server does.
KEEPALIVE_S = 30.0
#: Seconds rollgym's servers keep an idle connection open: well above :data:`KEEPALIVE_S`.
SERVER_KEEPALIVE_S = 75


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


class HttpClient:
    """A pooled client that speaks JSON and knows which server it talks to.

    ``limit`` caps open connections (0 = no cap). ``metrics`` is the connection-pool recorder
    set up by telemetry, or None. ``replicas``: ``{server: [replica URLs]}`` of the servers
    launched with several replicas (their first URL is the one callers use). ``transport``:
    send every JSON exchange through it instead of the network (an in-memory one,
    :class:`~rollgym.http.memory.MemoryTransport`, for tests); streams still go through aiohttp.
    """

    def __init__(
        self,
        *,
        limit: int = 0,
        metrics: PoolMetrics | None = None,
        replicas: Mapping[str, list[str]] | None = None,
        limits: ExchangeLimits | None = None,
        transport: Transport | None = None,
    ) -> None:
        self._limit = limit
        self.limits = limits or ExchangeLimits()
        self._metrics = metrics
        self.replicas = ReplicaTable(replicas)
        self._given = transport
        #: The transports, opened by :meth:`start` (which one a URL takes: ``transport_for``).
        self._transports: TransportChooser | None = None
        #: Resends counted by transports already closed (``resent`` outlives a close).
        self._resent_closed = 0

    async def __aenter__(self) -> HttpClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the pool. Call it outside any span."""
        if self._transports is None:
            self._transports = TransportChooser(
                limit=self._limit, keepalive_s=KEEPALIVE_S, metrics=self._metrics, given=self._given
            )

    async def close(self) -> None:
        transports, self._transports = self._transports, None
        if transports is not None:
            self._resent_closed += transports.resent
            await transports.close()

    @property
    def resent(self) -> int:
        """How many requests were resent on a fresh connection (see the module doc)."""
        transports = self._transports
        return self._resent_closed + (0 if transports is None else transports.resent)

    def transport_for(self, url: str) -> Transport:
        """The transport that sends a JSON exchange to ``url`` (:mod:`rollgym.http.chooser`)."""
        return self._chooser().for_url(url)

    def _chooser(self) -> TransportChooser:
        transports = self._transports
        if transports is None:
            raise RuntimeError("HttpClient used before start(); create it at process start-up")
        return transports

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
        transports = self._chooser()
        method, destination, url, body, timeout, _, _ = call
        data = orjson.dumps(body) if body is not None else None
        limits = self.limits
        if data is not None:
            limits.check_request(destination, method, url, len(data))
        metrics = self._metrics
        if metrics is not None:
            metrics.request_started(destination)
        exchange = Exchange(destination, limits, timeout, metrics, span)
        try:
            status, answer_headers, raw = await self._exchange(
                transports, exchange, Request(method, url, data, headers)
            )
        except TimeoutError:
            raise _timed_out(destination, method, url, timeout) from None
        except SendFailed as exc:
            raise _unreachable(destination, method, url, exc) from None
        except AnswerTooLarge as exc:
            raise limits.too_large(destination, method, _path(url), exc.size) from None
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
        self, transports: TransportChooser, exchange: Exchange, request: Request
    ) -> Answer:
        """One request and its same-host redirects, each hop through the transport its URL
        takes: the last answer (read within ``max_response_bytes``)."""
        limits = self.limits
        redirects = 0
        while True:
            # Every URL a request goes to passes here (the first and each redirect's), so
            # this is where one with a control character is refused.
            limits.check_url(exchange.destination, request.method, request.url)
            transport = transports.for_url(request.url)
            answer = await transport.send(request, exchange)
            status = answer.status
            target = redirect_target(exchange.destination, status, request.url, answer.headers)
            if target is None:
                return answer
            redirects += 1
            limits.check_redirect(exchange.destination, status, request.url, target, redirects)
            if status == 303 or (status in (301, 302) and request.method == "POST"):
                request = Request("GET", target, None, request.headers)  # as browsers do
            else:
                request = request._replace(url=target)

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
        transport = self._chooser().for_stream()
        sent_headers = _with_json(headers)
        span_scope: AbstractContextManager[Any] = nullcontext()
        if gate.http:
            from rollgym.telemetry.spans import http_client_span

            span_scope = http_client_span("POST", destination, url, route)
        with span_scope as span:
            if gate.tracing:
                _inject(sent_headers, span)
            try:
                async with transport.stream(
                    url, orjson.dumps(body), sent_headers, timeout
                ) as response:
                    if span is not None:
                        _record_status(span, response.status)
                    yield response
            except TimeoutError:
                raise _timed_out(destination, "POST", url, timeout) from None
            except SendFailed as exc:
                raise _unreachable(destination, "POST", url, exc) from None


def _timed_out(destination: str, method: str, url: str, timeout: float | None) -> RequestTimeout:
    return RequestTimeout(
        f"no answer from {destination!r} within {timeout}s ({method} {_path(url)})",
        server=destination,
    )


def _unreachable(destination: str, method: str, url: str, exc: SendFailed) -> ConnectError:
    """A transport's failure as rollgym's: ``ConnectionRefused`` when nothing listened."""
    error = ConnectionRefused if exc.refused else ConnectError
    cause = exc.cause
    return error(
        redact_text(
            f"cannot reach {destination!r} ({method} {_path(url)}): {type(cause).__name__}: {cause}"
        ),
        server=destination,
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
