"""The seam under :class:`~rollgym.http.client.HttpClient`: what one transport must do.

The client does, once for every way a request can travel, what is common: the ``traceparent``
it injects, its span, size limits, redirects, the connection-pool metrics and the translation
of failures into rollgym's errors. Below it, a :class:`Transport` sends one prepared request
(one hop: a redirect is the client's next hop) and returns the whole answer. Which transport
sends a URL is chosen by :mod:`rollgym.http.chooser`: the lean one (:mod:`.lean_transport`)
for plain ``http://``, aiohttp's (:mod:`.aiohttp_transport`) for the rest, or one given to the
client (an in-memory one, :mod:`.memory`, answers from a function without a socket).

A transport raises only three things, so the client's one error boundary needs to know no
transport: ``TimeoutError`` past the exchange's time limit, :class:`AnswerTooLarge` past
its ``max_response_bytes``, :class:`SendFailed` for anything below HTTP (it names whether
nothing listened). An answer with any HTTP status is an answer, not an error.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from rollgym.http.limits import ExchangeLimits
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate

if TYPE_CHECKING:  # a type only: importing aiohttp is its transport's business
    import aiohttp


class Request(NamedTuple):
    """One request as it goes out (a redirect makes the next one): its body already bytes,
    its headers final (``Content-Type``, ``traceparent``); ``Host`` and ``Content-Length``
    are the transport's."""

    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]


class Headers(dict[str, str]):
    """An answer's headers, names lower-cased; :meth:`get` takes any case (HTTP names are
    case-insensitive). Repeated headers are joined with ``", "``."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)


class Answer(NamedTuple):
    """One whole answer: status, headers (``get`` in any case), body (empty for a redirect)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class SendFailed(Exception):
    """A send that failed below HTTP (connect, disconnect, an unparsable answer).

    ``cause`` is the transport's own exception (its type and text go into the message the
    caller sees); ``refused``: nothing listened at the address.
    """

    def __init__(self, cause: BaseException, *, refused: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.refused = refused


class AnswerTooLarge(Exception):
    """The answer passed the exchange's byte limit; ``size`` is what is known of it."""

    def __init__(self, size: str) -> None:
        super().__init__(size)
        self.size = size


class PoolMetrics(Protocol):
    """What the client records about its pool (``telemetry.metrics.HttpClientMetrics``)."""

    def request_started(self, destination: str) -> None: ...

    def request_finished(self, destination: str) -> None: ...

    def trace_config(self) -> aiohttp.TraceConfig: ...

    def connection_wait(self, destination: str, seconds: float) -> None:
        """The wait for a connection of a request sent outside aiohttp (:mod:`.lean`)."""


class Exchange:
    """What every hop of one request shares: its server, limits, time limit and observers."""

    __slots__ = ("destination", "limits", "timeout", "metrics", "started", "observed", "span")

    def __init__(
        self,
        destination: str,
        limits: ExchangeLimits,
        timeout: float | None,
        metrics: PoolMetrics | None = None,
        span: Any = None,
    ):
        self.destination = destination
        self.limits = limits
        #: Seconds for the whole exchange, waits included (None: no limit).
        self.timeout = timeout
        self.metrics = metrics
        #: The request's client span, handed down so the queue wait lands on it without a
        #: current-span lookup through the API per request; None: look it up.
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
        """The wait for a connection, where aiohttp's hooks would record it: on the span and
        in the pool metrics."""
        if self.span is not None:
            note_queue_wait(seconds, self.span)
        elif gate.http:
            note_queue_wait(seconds)
        if self.metrics is not None:
            self.metrics.connection_wait(self.destination, seconds)


class Transport(Protocol):
    """Sends one request and reads its whole answer; no redirect followed, no retry beyond
    its own (a pooled connection the server had closed unread may be sent again)."""

    def send(self, request: Request, exchange: Exchange) -> Awaitable[Answer]:
        """The answer to ``request``, read within ``exchange.limits.max_response_bytes``;
        raises ``TimeoutError``, :class:`AnswerTooLarge` or :class:`SendFailed` (module doc).
        A plain method returning the awaitable may skip a coroutine frame on the hot path."""
        ...

    @property
    def resent(self) -> int:
        """How many requests were sent once more on a fresh connection."""
        ...

    async def close(self) -> None:
        """Close every connection; the transport is not used again."""
        ...


@functools.cache
def _current_span() -> Any:
    """``trace.get_current_span``, imported once (an import statement per request costs)."""
    from opentelemetry import trace

    return trace.get_current_span


def note_queue_wait(seconds: float, span: Any = None) -> None:
    """The wait for a connection (pooled or new) on the request's client span (``span``, else
    the one current in this task), so a trace alone says how long each request queued."""
    try:
        if span is None:
            span = _current_span()()
        if span.is_recording():
            span.set_attribute(names.HTTP_CLIENT_QUEUE_DURATION, seconds)
    except Exception:  # telemetry never fails the request it observes
        return
