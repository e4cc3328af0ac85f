"""OpenAI SDK clients that stay in their rollout's trace.

``RolloutContext.async_openai()`` / ``.openai()`` hand an agent an ``openai.AsyncOpenAI`` /
``openai.OpenAI`` whose base URL is the rollout-scoped model URL (``<model>/r/<rollout id>/v1``)
and whose every request goes through a per-rollout ``RolloutTransport``, itself a thin layer over
the process's one shared connection pool (:mod:`rollgym.servers.sdk_pool`), so a rollout's client
costs about a tenth of a millisecond to make and opens no connection of its own. The SDK's HTTP
client is one that OpenTelemetry's httpx instrumentation cannot hook, so without this the SDK
sends no ``traceparent`` and the model server's spans start traces of their own.

The one place a request and its answer are seen is :meth:`RolloutTransport.before_send` /
:meth:`RolloutTransport.after_answer`: the request gets ``X-Request-Id: <rollout id>.<turn>``
(the same turn counter as ``RolloutContext.chat``) and the current ``traceparent``, and the
call is a ``gym.model.chat`` span (gate ``model``) with the answer's usage, and, when the
rollout records a trajectory, each chat completion (request body and JSON answer) goes into it
through ``record``. A streamed chat completion (``stream=True``) is recorded too: its bytes
pass through a :class:`~rollgym.trajectory.stream.ChatStreamJoiner` as the agent reads them,
and the joined answer is recorded once the stream ends or is closed. Extend those methods,
not the SDK.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, Protocol

import orjson

import rollgym.policy_versions as policy_versions
import rollgym.server_timing as server_timing
from rollgym.servers.sdk_pool import async_pool, http_library, require_openai, sync_pool
from rollgym.servers.sse import MEDIA_TYPE
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate
from rollgym.trajectory.stream import ChatStreamJoiner

if TYPE_CHECKING:
    import httpx2
    import openai

#: ``gen_ai.provider.name`` of SDK calls: every model server speaks the OpenAI API.
PROVIDER = "openai"
#: The SDK needs some key; rollgym's model servers need none (a proxy holds the real one).
PLACEHOLDER_KEY = "rollgym-no-key"
#: Puts one chat completion (request body, answer) into the rollout's trajectory.
Record = Callable[[dict[str, Any], dict[str, Any]], None]


class SdkModel(Protocol):
    """What an SDK client needs of the rollout's model client
    (:class:`rollgym.servers.rollout_context.ModelClient` has it): a Protocol, so this module
    never imports the rollout context that imports it."""

    @property
    def model_name(self) -> str: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def rollout_id(self) -> str | None: ...

    @property
    def sdk_base_url(self) -> str:
        """The rollout-scoped base URL the SDK posts to (``.../r/<rollout id>/v1``)."""
        ...

    @property
    def policy_floor(self) -> str | None:
        """The rollout dispatch's policy floor header, sent on with every call (or None)."""
        ...

    def next_request_id(self) -> str:
        """``<rollout id>.<turn>`` of the next call."""
        ...


class _RolloutHooks:
    """What both transports do around one request, for one rollout's model client."""

    def __init__(self, model: SdkModel, record: Record | None) -> None:
        self.model = model
        self.record = record

    def wants_body(self, span: Any, response: httpx2.Response) -> bool:
        """Read the answer's body only for the span or the trajectory, and only JSON."""
        return (span is not None or self.record is not None) and _is_json(response)

    def stream_recorder(
        self, request: httpx2.Request, response: httpx2.Response
    ) -> tuple[Callable[[bytes], None], Callable[[], None]] | None:
        """For a streamed chat completion of a rollout that records a trajectory: what to call
        with each piece of the stream and once at its end; None for anything else."""
        record = self.record
        if record is None or not _is_chat(request, response) or not _is_stream(response):
            return None
        joiner = ChatStreamJoiner()
        finished = False

        def finish() -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            with suppress(orjson.JSONDecodeError):
                record(orjson.loads(request.content), _with_version(joiner.answer(), response))

        return joiner.feed, finish

    def before_send(self, request: httpx2.Request) -> None:
        """Stamp the request: its request id, the rollout's policy floor and the current trace
        context."""
        request.headers[names.HEADER_REQUEST_ID] = self.model.next_request_id()
        floor = self.model.policy_floor
        if floor is not None:
            request.headers[policy_versions.FLOOR_HEADER] = floor
        if gate.tracing:
            from opentelemetry import propagate

            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            request.headers.update(carrier)

    def span(self) -> AbstractContextManager[Any]:
        if not gate.model:
            return nullcontext(None)
        from rollgym.telemetry import spans

        return spans.model_chat_span(self.model.rollout_id, self.model.model_name, PROVIDER)

    def answer_unread(
        self,
        span: Any,
        request: httpx2.Request,
        response: httpx2.Response,
        recorded_stream: Callable[..., Any],
    ) -> httpx2.Response | None:
        """The answer to hand the SDK as it is (a stream, fed to the trajectory through
        ``recorded_stream`` as the agent reads it, or a body neither the span nor the
        trajectory needs), already recorded; None where its body must be read first."""
        recorder = self.stream_recorder(request, response)
        if recorder is not None:
            self.after_answer(span, request, response, None)
            return _with_stream(request, response, recorded_stream(response.stream, *recorder))
        if not self.wants_body(span, response):
            self.after_answer(span, request, response, None)
            return response
        return None

    def after_answer(
        self, span: Any, request: httpx2.Request, response: httpx2.Response, body: bytes | None
    ) -> None:
        """Record the answer on the span (status, usage when the body was JSON) and a chat
        completion in the trajectory; the engine seconds the server reports join the usage."""
        server_timing.note_header(response.headers.get(server_timing.HEADER))
        answer = None
        if body:
            with suppress(orjson.JSONDecodeError):
                answer = orjson.loads(body)
        if self.record is not None and _is_chat(request, response) and isinstance(answer, dict):
            with suppress(orjson.JSONDecodeError):
                self.record(orjson.loads(request.content), answer)
        if span is None:
            return
        from rollgym.telemetry import spans

        span.set_attribute(names.HTTP_RESPONSE_STATUS_CODE, response.status_code)
        if answer is not None:
            spans.record_model_response(span, answer)


def _with_version(answer: dict[str, Any], response: httpx2.Response) -> dict[str, Any]:
    """A streamed answer's policy version travels in the response header, not in a chunk."""
    version = response.headers.get(policy_versions.HEADER)
    if version:
        answer.setdefault(policy_versions.ANSWER_KEY, policy_versions.parse_version(version))
    return answer


def _is_json(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")


def _is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith(MEDIA_TYPE)


def _is_chat(request: httpx2.Request, response: httpx2.Response) -> bool:
    return request.url.path.endswith("/chat/completions") and response.status_code == 200


def _with_stream(
    request: httpx2.Request, response: httpx2.Response, stream: Any
) -> httpx2.Response:
    """The same answer, its body read through ``stream``."""
    return type(response)(
        response.status_code,
        headers=response.headers,
        stream=stream,
        request=request,
        extensions=response.extensions,
    )


class _StreamParts:
    """What both recorded byte streams hold: the pool's stream and the recorder's two calls."""

    def __init__(self, inner: Any, feed: Callable[[bytes], None], finish: Callable[[], None]):
        self.inner, self.feed, self.finish = inner, feed, finish


class _TransportParts:
    """What both rollout transports hold: the rollout's hooks and the shared pool under them."""

    def __init__(self, hooks: _RolloutHooks, inner: Any) -> None:
        self.hooks = hooks
        self.inner = inner


@functools.cache
def _async_transport_class() -> type[Any]:
    """The per-rollout async transport class, made once for the SDK's HTTP library."""
    http = http_library()

    class RecordedStream(_StreamParts, http.AsyncByteStream):  # type: ignore[name-defined]
        """A streamed answer's body, fed to the trajectory as the agent reads it."""

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                self.feed(chunk)
                yield chunk
            self.finish()

        async def aclose(self) -> None:
            try:
                await self.inner.aclose()
            finally:
                self.finish()

    class RolloutTransport(_TransportParts, http.AsyncBaseTransport):  # type: ignore[name-defined]
        """Stamps and traces each request of one rollout, sent over the loop's shared pool."""

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            with self.hooks.span() as span:
                self.hooks.before_send(request)
                response = await self.inner.handle_async_request(request)
                unread = self.hooks.answer_unread(span, request, response, RecordedStream)
                if unread is not None:
                    return unread
                # read once, kept on the answer (httpx caches it): the SDK reads it again
                # for free, where a rebuilt answer cost a second header parse per call
                body = await response.aread()
                self.hooks.after_answer(span, request, response, body)
                return response

        async def aclose(self) -> None:
            """Nothing of its own to close: the pool is shared by the process's rollouts."""

    return RolloutTransport


def async_transport(model: SdkModel, record: Record | None = None) -> httpx2.AsyncBaseTransport:
    """The transport of one rollout's async SDK client, over the running loop's shared pool."""
    transport: httpx2.AsyncBaseTransport = _async_transport_class()(
        _RolloutHooks(model, record), async_pool()
    )
    return transport


@functools.cache
def _sync_transport_class() -> type[Any]:
    """The per-rollout blocking transport class, made once for the SDK's HTTP library."""
    http = http_library()

    class RecordedStream(_StreamParts, http.SyncByteStream):  # type: ignore[name-defined]
        """The blocking twin of the async recorded stream."""

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                self.feed(chunk)
                yield chunk
            self.finish()

        def close(self) -> None:
            try:
                self.inner.close()
            finally:
                self.finish()

    class RolloutTransport(_TransportParts, http.BaseTransport):  # type: ignore[name-defined]
        """The blocking twin of the async transport (same hooks, the process's shared pool)."""

        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            with self.hooks.span() as span:
                self.hooks.before_send(request)
                response = self.inner.handle_request(request)
                unread = self.hooks.answer_unread(span, request, response, RecordedStream)
                if unread is not None:
                    return unread
                # read once, kept on the answer (httpx caches it): the SDK reads it again
                # for free, where a rebuilt answer cost a second header parse per call
                body = response.read()
                self.hooks.after_answer(span, request, response, body)
                return response

        def close(self) -> None:
            """Nothing of its own to close: the pool is shared by the process's rollouts."""

    return RolloutTransport


def sync_transport(model: SdkModel, record: Record | None = None) -> httpx2.BaseTransport:
    """The transport of one rollout's blocking SDK client, over the process's shared pool."""
    transport: httpx2.BaseTransport = _sync_transport_class()(
        _RolloutHooks(model, record), sync_pool()
    )
    return transport


def _parsed_base_url(model: SdkModel) -> Any:
    """The base URL parsed once, with the trailing slash the SDK would add: given a string,
    the SDK parses it three times per client (URL parsing was most of a client's cost)."""
    return http_library().URL(model.sdk_base_url.rstrip("/") + "/")


def async_client(model: SdkModel, record: Record | None = None) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` on the rollout-scoped URL of ``model``, stamped and traced; with
    ``record``, its chat completions go into the rollout's trajectory."""
    openai = require_openai()
    transport = async_transport(model, record)
    http = http_library().AsyncClient(transport=transport, timeout=model.timeout)
    return openai.AsyncOpenAI(
        base_url=_parsed_base_url(model), api_key=PLACEHOLDER_KEY, http_client=http, max_retries=0
    )


def sync_client(model: SdkModel, record: Record | None = None) -> openai.OpenAI:
    """An ``OpenAI`` (blocking) client like :func:`async_client`; for a thread, not the loop."""
    openai = require_openai()
    http = http_library().Client(transport=sync_transport(model, record), timeout=model.timeout)
    return openai.OpenAI(
        base_url=_parsed_base_url(model), api_key=PLACEHOLDER_KEY, http_client=http, max_retries=0
    )
