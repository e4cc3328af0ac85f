"""OpenAI SDK clients that stay in their rollout's trace.

``RolloutContext.async_openai()`` / ``.openai()`` hand an agent an ``openai.AsyncOpenAI`` /
``openai.OpenAI`` whose base URL is the rollout-scoped model URL (``<model>/r/<rollout id>/v1``)
and whose every request goes through a per-rollout ``RolloutTransport``, itself a thin layer over
the process's one shared connection pool (:mod:`rollgym.servers.sdk_pool`), so a rollout's client
costs about a tenth of a millisecond to make and opens no connection of its own. The SDK's HTTP
client is one that OpenTelemetry's httpx instrumentation cannot hook, so without this the SDK
sends no ``traceparent`` and the model server's spans start traces of their own.

The one place a request and its answer are seen is the transport's ``handle_request`` through
:class:`_Call` and :class:`_RolloutHooks`: the request gets ``X-Request-Id: <rollout id>.<turn>``
(the same turn counter as ``RolloutContext.chat``) and the ``traceparent`` of its
``gym.model.chat`` span (gate ``model``); a model answer (a chat completion or a Responses
``response``, streamed or not) goes to the rollout's ``record`` once it is whole: its usage,
the seconds the call took (``usage.model_s``) and, when the rollout records a trajectory, the
turn with the ``X-Request-Id`` it was sent with. A streamed answer's bytes pass through a
joiner (:mod:`rollgym.trajectory.stream`, :mod:`rollgym.trajectory.responses`) as the agent
reads them, and the call (its span included) ends when the stream ends or is closed, so the
span lasts as long as the stream and carries the usage, response id, finish reason and policy
version the stream carried; a stream that ends without a finish reason is recorded as
incomplete (:mod:`rollgym.trajectory.completeness`). Extend these, not the SDK.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Protocol

import orjson

import rollgym.policy_versions as policy_versions
import rollgym.server_timing as server_timing
from rollgym.servers.sdk_pool import async_pool, http_library, require_openai, sync_pool
from rollgym.servers.sse import MEDIA_TYPE
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate
from rollgym.trajectory.completeness import incomplete_reason
from rollgym.trajectory.record import API_KEY, RESPONSES_API
from rollgym.trajectory.responses import ResponsesStreamJoiner, as_chat_completion
from rollgym.trajectory.stream import ChatStreamJoiner

if TYPE_CHECKING:
    import httpx2
    import openai

#: ``gen_ai.provider.name`` of SDK calls: every model server speaks the OpenAI API.
PROVIDER = "openai"
#: The SDK needs some key; rollgym's model servers need none (a proxy holds the real one).
PLACEHOLDER_KEY = "rollgym-no-key"
#: The two model APIs whose calls are recorded, by the end of their path.
_CHAT_PATH = "/chat/completions"
_RESPONSES_PATH = "/responses"


class Record(Protocol):
    """Counts one model call in the rollout's usage and puts it into its trajectory
    (:meth:`rollgym.servers.rollout_context.RolloutContext.record_model_call`)."""

    def __call__(
        self,
        request: dict[str, Any],
        answer: dict[str, Any],
        *,
        seconds: float | None = None,
        request_id: str | None = None,
    ) -> None: ...


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


class _Call:
    """One request of a rollout's SDK client, from its send until its answer is whole.

    Why an object: a streamed answer is whole only when the agent has read its last byte,
    long after the transport handed the SDK its headers, so what the call measures (the
    ``gym.model.chat`` span, the seconds for ``usage.model_s``) starts here and ends in
    :meth:`finish`, called by whichever comes last: the body read, or the stream's end.
    """

    __slots__ = ("hooks", "request", "request_id", "span", "started", "_finished")

    def __init__(self, hooks: _RolloutHooks, request: httpx2.Request) -> None:
        self.hooks = hooks
        self.request = request
        self.span: Any = hooks.start_span()
        self.request_id = hooks.model.next_request_id()
        request.headers[names.HEADER_REQUEST_ID] = self.request_id
        floor = hooks.model.policy_floor
        if floor is not None:
            request.headers[policy_versions.FLOOR_HEADER] = floor
        if gate.tracing:
            from opentelemetry import propagate, trace

            carrier: dict[str, str] = {}
            span_context = trace.set_span_in_context(self.span) if self.span else None
            propagate.inject(carrier, context=span_context)
            request.headers.update(carrier)
        self.started = time.perf_counter()
        self._finished = False

    def failed(self, error: BaseException) -> None:
        """The request got no answer: the span says why and ends."""
        if self._finished:
            return
        self._finished = True
        if self.span is not None:
            from rollgym.telemetry.current_span import record_error

            record_error(self.span, error)
            self.span.end()

    def finish(self, response: httpx2.Response, answer: dict[str, Any] | None) -> None:
        """The answer is whole (``answer``: the chat completion it amounts to, None when it
        is not a model answer): recorded once, with the seconds the call took."""
        if self._finished:
            return
        self._finished = True
        seconds = time.perf_counter() - self.started
        server_timing.note_header(response.headers.get(server_timing.HEADER))
        record = self.hooks.record
        if record is not None and answer is not None:
            request = _recorded_request(self.request)
            if request is not None:
                record(request, answer, seconds=seconds, request_id=self.request_id)
        span = self.span
        if span is None:
            return
        from rollgym.telemetry import spans

        span.set_attribute(names.HTTP_RESPONSE_STATUS_CODE, response.status_code)
        if answer is not None:
            spans.record_model_response(span, answer)
            from rollgym.telemetry.content_capture import capture

            if capture.content:  # the body parsed again only when messages are kept
                sent = _recorded_request(self.request)
                messages = sent.get("messages") if sent is not None else None
                if isinstance(messages, list):
                    spans.record_model_messages(span, messages, answer)
            reason = incomplete_reason(answer)
            if reason is not None:
                span.set_attribute(names.ERROR_TYPE, f"incomplete:{reason}")
        span.end()


class _RolloutHooks:
    """What both transports do around one request, for one rollout's model client."""

    def __init__(self, model: SdkModel, record: Record | None) -> None:
        self.model = model
        self.record = record

    def start_span(self) -> Any:
        """``gym.model.chat`` of one call (gate ``model``), not yet ended; None when off."""
        if not gate.model:
            return None
        from rollgym.telemetry import spans

        return spans.start_model_chat_span(self.model.rollout_id, self.model.model_name, PROVIDER)

    def watches(self, call: _Call) -> bool:
        """Whether the answer matters to anyone: the span or the trajectory and usage."""
        return call.span is not None or self.record is not None

    def answer_unread(
        self, call: _Call, response: httpx2.Response, recorded_stream: Callable[..., Any]
    ) -> httpx2.Response | None:
        """The answer to hand the SDK as it is (a model stream, fed to the recorder through
        ``recorded_stream`` as the agent reads it and finished at its end, or a body nobody
        needs, finished now); None where its body must be read first (:meth:`after_answer`)."""
        api = _api_of(call.request, response)
        if api is not None and _is_stream(response) and self.watches(call):
            joiner = ResponsesStreamJoiner() if api == _RESPONSES_PATH else ChatStreamJoiner()

            def finish() -> None:
                call.finish(response, _with_version(joiner.answer(), response))

            return _with_stream(
                call.request, response, recorded_stream(response.stream, joiner.feed, finish)
            )
        if not (self.watches(call) and _is_json(response)):
            call.finish(response, None)
            return response
        return None

    def after_answer(self, call: _Call, response: httpx2.Response, body: bytes) -> None:
        """A read answer: a model answer is recorded (trajectory, usage, span), the call ends."""
        answer = None
        api = _api_of(call.request, response)
        if body and api is not None:
            with suppress(orjson.JSONDecodeError):
                answer = orjson.loads(body)
        if isinstance(answer, dict) and api == _RESPONSES_PATH:
            answer = as_chat_completion(answer)
        call.finish(response, _with_version(answer, response) if isinstance(answer, dict) else None)


def _recorded_request(request: httpx2.Request) -> dict[str, Any] | None:
    """The request body as the recorder takes it: a chat request as sent, a Responses
    request as the chat request it amounts to (the translation rollgym's model servers use),
    marked ``api: responses``; None when it is not a JSON object."""
    try:
        body = orjson.loads(request.content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    if not request.url.path.endswith(_RESPONSES_PATH):
        return body
    from rollgym.servers import responses_api

    try:
        chat = responses_api.to_chat_request(responses_api.parse_request(body))
    except Exception:  # a request the translation refuses: what it asked is still recorded
        chat = {"messages": []}
    kept = {k: v for k, v in body.items() if k not in _RESPONSES_ONLY and k not in chat}
    return {**kept, **chat, API_KEY: RESPONSES_API, "stream": bool(body.get("stream"))}


#: Responses request fields the chat request says in its own way (or not at all).
_RESPONSES_ONLY = frozenset(
    ("input", "instructions", "max_output_tokens", "tools", "tool_choice", "store", "stream")
)


def _with_version(answer: dict[str, Any], response: httpx2.Response) -> dict[str, Any]:
    """The policy version the model server answered in its header, where the body has none
    (a stream's chunks never carry it)."""
    version = response.headers.get(policy_versions.HEADER)
    if version:
        answer.setdefault(policy_versions.ANSWER_KEY, policy_versions.parse_version(version))
    return answer


def _is_json(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")


def _is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith(MEDIA_TYPE)


def _api_of(request: httpx2.Request, response: httpx2.Response) -> str | None:
    """Which model API a successful answer is of (its path's end), None for anything else."""
    if response.status_code != 200:
        return None
    path = request.url.path
    for api in (_CHAT_PATH, _RESPONSES_PATH):
        if path.endswith(api):
            return api
    return None


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
            try:
                async for chunk in self.inner:
                    self.feed(chunk)
                    yield chunk
            finally:
                self.finish()

        async def aclose(self) -> None:
            try:
                await self.inner.aclose()
            finally:
                self.finish()

    class RolloutTransport(_TransportParts, http.AsyncBaseTransport):  # type: ignore[name-defined]
        """Stamps and traces each request of one rollout, sent over the loop's shared pool."""

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            call = _Call(self.hooks, request)
            try:
                response = await self.inner.handle_async_request(request)
                unread = self.hooks.answer_unread(call, response, RecordedStream)
                if unread is not None:
                    return unread
                # read once, kept on the answer (httpx caches it): the SDK reads it again
                # for free, where a rebuilt answer cost a second header parse per call
                body = await response.aread()
            except BaseException as error:
                call.failed(error)
                raise
            self.hooks.after_answer(call, response, body)
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
            try:
                for chunk in self.inner:
                    self.feed(chunk)
                    yield chunk
            finally:
                self.finish()

        def close(self) -> None:
            try:
                self.inner.close()
            finally:
                self.finish()

    class RolloutTransport(_TransportParts, http.BaseTransport):  # type: ignore[name-defined]
        """The blocking twin of the async transport (same hooks, the process's shared pool)."""

        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            call = _Call(self.hooks, request)
            try:
                response = self.inner.handle_request(request)
                unread = self.hooks.answer_unread(call, response, RecordedStream)
                if unread is not None:
                    return unread
                # read once, kept on the answer (httpx caches it): the SDK reads it again
                # for free, where a rebuilt answer cost a second header parse per call
                body = response.read()
            except BaseException as error:
                call.failed(error)
                raise
            self.hooks.after_answer(call, response, body)
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
