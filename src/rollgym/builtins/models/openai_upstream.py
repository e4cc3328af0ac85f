"""A model server in front of any OpenAI-compatible upstream (vLLM, llama.cpp, OpenAI, a gateway).

Requests go out through the process's one HttpClient, so ``traceparent`` reaches the upstream
and an engine such as vLLM joins the rollout's trace. Each call opens a ``chat <model>``
span (gate ``model``) that records usage, time to first token when streaming, and which
request id went upstream (``gym.model.request_id`` -> ``gym.model.upstream_request_id``).

How the request id goes upstream is the ``request_id`` option (:class:`RequestIdPolicy`):
``header`` sends ``X-Request-Id: <rollout id>.<turn>``; ``uuid`` sends a UUID derived from it
(engines such as llama.cpp's Python server refuse anything else); ``none`` sends nothing;
``auto`` (default) sends the header and, when the upstream refuses it with a 400, retries once
with the UUID and keeps the UUID form from then on. ``auto`` decides on its first call: calls
that arrive while it is deciding wait for that one answer, so no more than one call is ever
refused. A Responses call also carries the id in its body (``request_id: resp_<id>``), the
field vLLM takes on ``/v1/responses`` where it ignores the header, so the engine's own spans
name the rollout; an upstream that refuses the field gets the call again without it, and
never again.

Besides chat completions and responses, the proxy serves the legacy ``/v1/completions`` (text
and token-id prompts, streamed or not, attributed and stamped like chat) and vLLM's
``/tokenize`` and ``/detokenize`` (passed to the upstream's root; an upstream without them is
a 501 saying so). Every answer passes the upstream's own headers on (vLLM's
``x-request-id``...), never a hop-by-hop one or one the proxy writes itself.

A call the proxy's caller abandons (its connection closed: a rollout timed out, its agent
died) is cancelled by the server (:mod:`rollgym.http.disconnect`), and cancelling the
upstream call closes its connection, streamed or not: vLLM aborts a request whose client
went away, so an abandoned rollout's generation stops at the engine.

Streaming (``stream: true``) is passed through from the upstream as it arrives. The Responses
API is forwarded to the upstream's ``/v1/responses``; an upstream without that route (a 404
or 405) gets the request translated to chat completions from then on.

Weights: ``POST /policy_version`` with ``weights`` makes the proxy reload vLLM in place from
that checkpoint folder (:meth:`OpenAIUpstream.load_weights`: vLLM's dev-mode
``/collective_rpc`` ``reload_weights``, then ``/reset_prefix_cache``) before it stamps the
version; the calls in flight finish first (:mod:`rollgym.servers.weight_gate`).

Errors: an upstream refusal is answered with the upstream's status and its message, so the
caller's retry rules see a 4xx as permanent; 401/403 say "authentication" and name the key's
environment variable. The API key is read from ``api_key_env`` at start-up and never appears
in a log line, an error or a span: every upstream text is scrubbed of it before it is passed on.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypedDict

import orjson
from pydantic import Field, model_validator

from rollgym.servers import (
    HEADER_REQUEST_ID,
    ChatRequest,
    CompletionRequest,
    HTTPError,
    ModelServer,
    RequestTimeout,
    ServerOptions,
    TransportError,
    check_one_place,
    gate,
    is_uuid,
    pass_headers,
    policy_versions,
    server_timing,
    upstream_uuid,
    wire_messages,
)

_KEY_LIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-*.]{6,}|Bearer\s+\S+)")
_CHAT = "/chat/completions"
_COMPLETIONS = "/completions"
_RESPONSES = "/responses"
#: The body field vLLM reads a Responses call's request id from (it ignores X-Request-Id there).
_BODY_ID = "request_id"
#: Answer headers never passed on: hop-by-hop ones (RFC 9110 7.6.1), those that describe the
#: upstream's own framing of the body, and those the proxy writes itself.
_NOT_PASSED = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-type",
        "content-encoding",
        "date",
        "server",
        "set-cookie",
        server_timing.HEADER.lower(),
        policy_versions.HEADER.lower(),
    )
)
#: ``gen_ai.provider.name`` of the upstream: it speaks the OpenAI API.
_PROVIDER = "openai"
#: How much of an upstream's error text is passed on.
_DETAIL_LIMIT = 2000

RequestIdPolicy = Literal["auto", "header", "uuid", "none"]


#: Lines of an upstream stream relayed between two returns to the event loop. Reading a line
#: that is already buffered and writing it on do not suspend, so while an engine streams
#: faster than the relay (vLLM's tokens, several streams at once) the relaying task never
#: let the loop run: the close of a client that gave up was not seen, its call not
#: cancelled, and the engine generated on to the end (vLLM counted the given-up
#: generations as finished). Every few lines the relay lets the loop run.
YIELD_EVERY_LINES = 16


class OpenAIUpstreamOptions(ServerOptions):
    """Where the upstream is and how to call it. ``model_name`` and ``request_timeout_s``
    were ``model`` and ``timeout_s``: elsewhere in a config ``model`` names a model server and
    ``timeout_s`` limits a whole attempt; the old names still work, with a note saying so."""

    server_refs: ClassVar[dict[str, Any]] = {"upstream": "model"}
    renamed: ClassVar[dict[str, str]] = {"model": "model_name", "timeout_s": "request_timeout_s"}

    base_url: str | None = Field(
        None, description="Upstream base URL including /v1, e.g. http://host:8000/v1."
    )
    upstream: str | None = Field(
        None,
        description="Instead of base_url: another model server of the job (e.g. a vLLM given "
        "by url:), reached at <its URL>/v1.",
    )
    model_name: str = Field(description="The model name sent upstream (replaces the request's).")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    request_timeout_s: float = Field(600.0, gt=0, description="Time limit of one upstream request.")
    request_id: RequestIdPolicy = Field(
        "auto",
        description="How the request id goes upstream: 'header' (X-Request-Id: <rollout>.<turn>), "
        "'uuid' (a UUID derived from it), 'none', or 'auto' (the header; on a 400 retry once "
        "with the UUID and keep that).",
    )

    @model_validator(mode="after")
    def _one_upstream(self) -> OpenAIUpstreamOptions:
        check_one_place(
            self.base_url, "base_url", self.upstream, "upstream", "another model server of the job"
        )
        return self


class OpenAIUpstream(ModelServer):
    """Forwards chat completions and responses to the upstream; answers what it answers."""

    Options: ClassVar[type[ServerOptions]] = OpenAIUpstreamOptions
    options: OpenAIUpstreamOptions

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._key: str | None = None
        #: The request-id form in use; ``auto`` until the upstream has told.
        self.id_policy: RequestIdPolicy = self.options.request_id
        #: Whether the upstream has ``/v1/responses``; None until it has told.
        self.native_responses: bool | None = None
        #: Whether the upstream takes a Responses call's id in its body; None until it has told.
        self.body_ids: bool | None = None
        #: Held by the one call that decides ``auto``; the others wait for its answer.
        self._deciding = asyncio.Lock()

    async def on_startup(self) -> None:
        env_name = self.options.api_key_env
        if env_name is not None:
            key = os.environ.get(env_name)
            if not key:
                raise RuntimeError(
                    f"environment variable {env_name!r} (api_key_env) is not set or empty"
                )
            self._key = key

    def model_names(self) -> list[str]:
        return [self.options.model_name]

    def scrub(self, text: str) -> str:
        """``text`` without the API key or anything that looks like one."""
        if self._key:
            text = text.replace(self._key, "<redacted>")
        return _KEY_LIKE.sub("<redacted>", text)

    # --- the two APIs --------------------------------------------------------------------------

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, object]:
        body = request.model_dump(exclude_none=True)
        body.pop("stream", None)
        body["messages"] = wire_messages(body.get("messages") or [])
        return await self._forward(_CHAT, body, request_id, rollout_id)

    async def respond(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        if self.native_responses is False:
            return await super().respond(body, request_id, rollout_id)
        try:
            answer = await self._forward(_RESPONSES, body, request_id, rollout_id, id_in_body=True)
        except _NoRoute:
            self.native_responses = False
            return await super().respond(body, request_id, rollout_id)
        self.native_responses = True
        return answer

    async def chat_events(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        body = request.model_dump(exclude_none=True)
        body["messages"] = wire_messages(body.get("messages") or [])
        # Ask for usage so the span can record it; the client sees the usage chunk only if
        # it asked for it itself.
        body["stream_options"] = {**(request.stream_options or {}), "include_usage": True}
        relay = _Relay(drop_usage_chunk=not request.usage_in_stream)
        async for chunk in self._stream(_CHAT, body, request_id, rollout_id, relay):
            yield chunk

    async def response_events(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        if self.native_responses is not False:
            try:
                relay = _Relay(drop_usage_chunk=False)
                async for chunk in self._stream(
                    _RESPONSES, body, request_id, rollout_id, relay, id_in_body=True
                ):
                    yield chunk
                self.native_responses = True
                return
            except _NoRoute:
                self.native_responses = False
        async for chunk in super().response_events(body, request_id, rollout_id):
            yield chunk

    async def complete_text(
        self, request: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        body = request.model_dump(exclude_none=True)
        body.pop("stream", None)
        return await self._forward(_COMPLETIONS, body, request_id, rollout_id)

    async def completion_events(
        self, request: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        body = request.model_dump(exclude_none=True)
        body["stream_options"] = {**(request.stream_options or {}), "include_usage": True}
        relay = _Relay(drop_usage_chunk=not request.usage_in_stream)
        async for chunk in self._stream(_COMPLETIONS, body, request_id, rollout_id, relay):
            yield chunk

    async def tokenize(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize`` / ``/detokenize``, at the upstream's root (beside ``/v1``)."""
        destination, base = self._target()
        root = base.removesuffix("/v1")
        try:
            response = await self.client.post_json(
                destination,
                root + route,
                {**body, "model": self.options.model_name},
                timeout=self.options.request_timeout_s,
                headers=self._headers(None),
                route=route,
            )
        except TransportError as exc:
            raise self._unreachable(exc) from None
        pass_headers(_passable(response.headers))
        if response.status == 200 and isinstance(response.data, dict):
            return response.data
        if response.status in (404, 405):
            raise HTTPError(
                501,
                f"the upstream model server has no {route} (it answered HTTP {response.status})",
            )
        detail = response.data if response.data is not None else response.text
        raise self._refusal(route, response.status, detail)

    async def load_weights(self, path: str) -> None:
        """vLLM reloads the checkpoint at ``path`` in place, from disk: ``POST /collective_rpc
        {"method": "reload_weights", "kwargs": {"weights_path": path}}`` (every worker runs its
        ``reload_weights``), then ``POST /reset_prefix_cache`` so no prefix cached under the old
        weights is reused. Both are vLLM's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``). vLLM
        swaps a model's layers out as it reloads them, so a checkpoint it cannot read could
        leave it half loaded: the path is checked here first (it must be a folder the proxy
        sees, holding ``*.safetensors`` or ``*.bin`` files), and an engine that fails anyway
        is said to need a restart."""
        problem = _checkpoint_problem(path)
        if problem is not None:
            raise HTTPError(422, problem)
        await self._engine_route("/collective_rpc", _reload_body(path), "reload the weights")
        await self._engine_route("/reset_prefix_cache", {}, "reset its prefix cache")

    async def _engine_route(self, route: str, body: dict[str, object], doing: str) -> None:
        """POST one of vLLM's dev-mode routes at the upstream's root; a clear error if not."""
        destination, base = self._target()
        try:
            response = await self.client.post_json(
                destination,
                base.removesuffix("/v1") + route,
                body,
                timeout=self.options.request_timeout_s,
                headers=self._headers(None),
                route=route,
            )
        except TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status == 200:
            return
        if response.status in (404, 405):
            raise HTTPError(
                501,
                f"the upstream has no {route} (HTTP {response.status}): start vLLM with "
                "VLLM_SERVER_DEV_MODE=1 for it to load weights from disk",
            )
        detail = _detail_text(response.data if response.data is not None else response.text)
        raise HTTPError(
            502,
            self.scrub(
                f"the engine failed to {doing} (HTTP {response.status}: {detail}); its weights "
                "may be partly replaced: restart it"
            ),
        )

    # --- the upstream call ---------------------------------------------------------------------

    def _target(self) -> tuple[str, str]:
        """(destination server name, base URL) of the upstream."""
        options = self.options
        if options.upstream is not None:
            return options.upstream, self.context.url_of(options.upstream) + "/v1"
        return "upstream", (options.base_url or "").rstrip("/")

    def _ids_to_try(self, request_id: str | None) -> Iterator[str | None]:
        """The request ids to send, in order: a second only while ``auto`` is undecided."""
        if request_id is None or self.id_policy == "none":
            yield None
        elif self.id_policy == "uuid" or is_uuid(request_id):
            yield request_id if is_uuid(request_id) else upstream_uuid(request_id)
        else:
            yield request_id
            if self.id_policy == "auto":
                yield upstream_uuid(request_id)

    def _learn(self, request_id: str | None, sent: str | None) -> None:
        """``auto`` decides on the first answer that is not the request-id refusal."""
        if self.id_policy == "auto" and request_id and sent and not is_uuid(request_id):
            self.id_policy = "uuid" if sent != request_id else "header"

    async def _decision(self, request_id: str | None) -> _Decision:
        """While ``auto`` is undecided, the one call that decides (the others wait here until
        it has: then they send the form it found, at once)."""
        if self.id_policy != "auto" or request_id is None or is_uuid(request_id):
            return _Decision(None)
        await self._deciding.acquire()
        if self.id_policy != "auto":  # decided while this call waited
            self._deciding.release()
            return _Decision(None)
        return _Decision(self._deciding)

    async def _post(
        self,
        destination: str,
        url: str,
        body: Mapping[str, object],
        sending: _Sending,
        sent_id: str | None,
        id_in_body: bool,
    ) -> Any:
        """One upstream POST; a Responses call carries its id in the body too (vLLM reads it
        there), unless the upstream refused that field once: then it is sent without it."""
        post = self.client.post_json
        if id_in_body and sent_id and self.body_ids is not False and _BODY_ID not in body:
            response = await post(
                destination, url, {**body, _BODY_ID: f"resp_{sent_id}"}, **sending
            )
            if not _refuses_body_id(response.status, response.data, response.text):
                return response
            self.body_ids = False
        return await post(destination, url, body, **sending)

    def _sending(self, route: str, sent_id: str | None) -> _Sending:
        """How one upstream call is sent, alike for an answer and a stream."""
        return {
            "timeout": self.options.request_timeout_s,
            "headers": self._headers(sent_id),
            "route": "/v1" + route,
        }

    def _headers(self, sent_id: str | None) -> dict[str, str]:
        headers = {}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        if sent_id:
            headers[HEADER_REQUEST_ID] = sent_id
        return headers

    async def _forward(
        self,
        route: str,
        body: Mapping[str, object],
        request_id: str | None,
        rollout_id: str | None,
        *,
        id_in_body: bool = False,
    ) -> dict[str, object]:
        """POST ``body`` (its ``model`` replaced) to the upstream's ``route``; its answer."""
        body = {**body, "model": self.options.model_name}
        with _model_span(rollout_id, self.options.model_name) as span:
            destination, base = self._target()
            decision = await self._decision(request_id)
            try:
                tries = list(self._ids_to_try(request_id))
                for attempt, sent_id in enumerate(tries):
                    sending = self._sending(route, sent_id)
                    try:
                        response = await self._post(
                            destination, base + route, body, sending, sent_id, id_in_body
                        )
                    except TransportError as exc:
                        raise self._unreachable(exc) from None
                    if response.status == 400 and attempt + 1 < len(tries):
                        continue  # perhaps the request id: try the next form
                    pass_headers(_passable(response.headers))
                    if response.status == 200 and isinstance(response.data, dict):
                        self._learn(request_id, sent_id)
                        decision.release()
                        _record(span, request_id, sent_id, response.data, None)
                        _note_engine_timings(response.data)
                        return response.data
                    detail = response.data if response.data is not None else response.text
                    raise self._refusal(route, response.status, detail)
            finally:
                decision.release()
        raise AssertionError("unreachable: at least one request id form is tried")

    async def _stream(
        self,
        route: str,
        body: Mapping[str, object],
        request_id: str | None,
        rollout_id: str | None,
        relay: _Relay,
        *,
        id_in_body: bool = False,
    ) -> AsyncIterator[bytes]:
        """The upstream's event stream, line by line as it arrives. Leaving it early (the
        caller gone) closes the upstream connection: the engine aborts the generation."""
        body = {**body, "model": self.options.model_name, "stream": True}
        with _model_span(rollout_id, self.options.model_name) as span:
            destination, base = self._target()
            decision = await self._decision(request_id)
            try:
                tries = list(self._ids_to_try(request_id))
                attempt = 0
                while True:
                    sent_id = tries[attempt]
                    with_id = bool(id_in_body and sent_id and self.body_ids is not False)
                    sent_body = {_BODY_ID: f"resp_{sent_id}", **body} if with_id else body
                    try:
                        async with self.client.stream(
                            destination, base + route, sent_body, **self._sending(route, sent_id)
                        ) as response:
                            if response.status != 200:
                                detail = _decoded(await response.read())
                                if with_id and _refuses_body_id(response.status, detail, ""):
                                    self.body_ids = False
                                    continue  # the same id, without the body field
                                if response.status == 400 and attempt + 1 < len(tries):
                                    attempt += 1
                                    continue  # perhaps the request id: try the next form
                                raise self._refusal(route, response.status, detail)
                            self._learn(request_id, sent_id)
                            decision.release()
                            pass_headers(_passable(response.headers))
                            relayed = 0
                            async for line in response.content:
                                kept = relay.see(line)
                                if kept:
                                    yield kept
                                relayed += 1
                                if relayed % YIELD_EVERY_LINES == 0:
                                    await asyncio.sleep(0)  # see YIELD_EVERY_LINES
                    except TransportError as exc:
                        raise self._unreachable(exc) from None
                    _record(span, request_id, sent_id, relay.answer, relay.first_token_s)
                    return
            finally:
                decision.release()

    # --- errors --------------------------------------------------------------------------------

    def _unreachable(self, exc: TransportError) -> HTTPError:
        status = 504 if isinstance(exc, RequestTimeout) else 502
        return HTTPError(status, self.scrub(f"upstream model server: {exc}"))

    def _refusal(self, route: str, status: int, detail: object) -> Exception:
        """The error to answer for an upstream's non-success answer, or a success whose body
        is not a JSON object (HTML from a gateway, JSON no strict parser takes): scrubbed of
        the key, a 502 unless the upstream's own status is an error."""
        if route == _RESPONSES and status in (404, 405):
            return _NoRoute()
        text = _detail_text(detail)
        if status in (401, 403):
            env_name = self.options.api_key_env
            where = (
                f"check the key in environment variable {env_name!r} (api_key_env)"
                if env_name
                else "no api_key_env is configured for this upstream"
            )
            message = f"upstream refused authentication (HTTP {status}): {where}: {text}"
        elif 200 <= status < 300:  # a success whose body cannot be read: the upstream's fault
            message = (
                f"upstream answered HTTP {status} with a body that is not a JSON object: {text}"
            )
        else:
            message = f"upstream answered HTTP {status}: {text}"
        return HTTPError(status if 400 <= status < 600 else 502, self.scrub(message))


class _Sending(TypedDict):
    """The keywords of one upstream call (``post_json`` or ``stream``): its time limit, the
    key and request-id headers, and the route template its span is named by."""

    timeout: float
    headers: dict[str, str]
    route: str


class _Decision:
    """The ``auto`` request-id decision one call holds (or nothing to hold): released once,
    as soon as the call's answer has decided, or when the call ends undecided."""

    __slots__ = ("_lock",)

    def __init__(self, lock: asyncio.Lock | None) -> None:
        self._lock = lock

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


def _passable(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The upstream's answer headers the proxy passes on (see :data:`_NOT_PASSED`)."""
    if not headers:
        return {}
    return {name: value for name, value in headers.items() if name.lower() not in _NOT_PASSED}


def _refuses_body_id(status: int, data: object, text: str) -> bool:
    """Whether an upstream's 400 refuses the ``request_id`` body field (OpenAI: "Unknown
    parameter: 'request_id'"), not something else of the request."""
    if status != 400:
        return False
    detail = _detail_text(data if data is not None else text)
    return _BODY_ID in detail


#: The files a Hugging Face checkpoint's weights are in (vLLM's default loader reads these).
_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")


def _checkpoint_problem(path: str) -> str | None:
    """Why ``path`` is no checkpoint vLLM can reload from (None: it looks like one)."""
    folder = Path(path)
    if not folder.is_dir():
        return f"no checkpoint folder at {path}"
    if not any(next(folder.glob(pattern), None) for pattern in _WEIGHT_FILES):
        return f"no weight files ({', '.join(_WEIGHT_FILES)}) in {path}"
    return None


def _reload_body(path: str) -> dict[str, object]:
    """vLLM's ``/collective_rpc`` body that reloads every worker's weights from ``path``."""
    return {"method": "reload_weights", "kwargs": {"weights_path": path}}


class _NoRoute(Exception):
    """The upstream has no ``/v1/responses``: translate to chat completions instead."""


def _decoded(raw: bytes) -> object:
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _detail_text(detail: object) -> str:
    """The upstream's error message: OpenAI's ``error.message``, else its body, never empty."""
    if isinstance(detail, dict):
        error = detail.get("error")
        if isinstance(error, dict) and error.get("message"):
            detail = error["message"]
        elif isinstance(error, str) and error:
            detail = error
        elif isinstance(detail.get("detail"), str):
            detail = detail["detail"]
        else:
            detail = orjson.dumps(detail).decode()
    text = str(detail).strip() if detail is not None else ""
    return text[:_DETAIL_LIMIT] if text else "(empty body)"


class _Relay:
    """Reads an SSE stream line by line on its way through: what the span records.

    Keeps the first token's time, the usage (chat's last chunk, or the Responses
    ``response.completed`` event) and the answer's id; drops the usage-only chat chunk the
    proxy asked for when the client did not.
    """

    def __init__(self, *, drop_usage_chunk: bool) -> None:
        self._drop_usage_chunk = drop_usage_chunk
        self._started = time.perf_counter()
        self.first_token_s: float | None = None
        self.answer: dict[str, Any] = {}

    def see(self, line: bytes) -> bytes | None:
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return line
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return line
        if not isinstance(event, dict):
            return line
        if self.first_token_s is None and _has_token(event):
            self.first_token_s = time.perf_counter() - self._started
        response = event.get("response") if event.get("type") == "response.completed" else None
        if isinstance(response, dict):
            self.answer = response
        elif event.get("usage"):
            self.answer = {"id": event.get("id"), "usage": event["usage"]}
            if self._drop_usage_chunk and not event.get("choices"):
                return None
        elif "id" in event and "id" not in self.answer:
            self.answer = {"id": event["id"]}
        return line


def _has_token(event: dict[str, Any]) -> bool:
    if event.get("type") in (
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    ):
        return True
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):  # a legacy completion's chunk
            return True
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return True
    return False


def _model_span(rollout_id: str | None, model: str) -> Any:
    """The proxy's ``chat <model>`` span (its call to the upstream, GenAI-named), or nothing."""
    if not gate.model:
        from contextlib import nullcontext

        return nullcontext(None)
    from rollgym.servers import spans

    return spans.genai_span(rollout_id, model, _PROVIDER, upstream=True)


def _note_engine_timings(answer: Mapping[str, object]) -> None:
    """The engine's own seconds where its answer says them (llama.cpp's ``timings``:
    ``prompt_ms`` + ``predicted_ms``), unless the upstream's ``Server-Timing`` already did;
    without either the model server reports the upstream call's wall time."""
    timings = answer.get("timings")
    current = server_timing.current()
    if not isinstance(timings, Mapping) or current is None:
        return
    if current.get(server_timing.ENGINE) is not None:
        return
    parts = [timings.get("prompt_ms"), timings.get("predicted_ms")]
    numbers = [p for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
    if numbers and all(n >= 0 for n in numbers):
        current.add(server_timing.ENGINE, sum(numbers) / 1000)


def _record(
    span: Any,
    request_id: str | None,
    sent_id: str | None,
    answer: dict[str, Any],
    first_token_s: float | None,
) -> None:
    """Usage, the answer's id, the request-id mapping and time to first token on the span."""
    if span is None:
        return
    from rollgym.servers import spans

    spans.record_model_response(span, answer)
    spans.record_upstream_request(span, request_id, sent_id, first_token_s)
