"""The model server base: OpenAI-compatible chat completions, attributed to their rollout.

Two routes reach the same ``complete``: the plain ``/v1/chat/completions`` (the rollout id is
the prefix of ``X-Request-Id: <rollout id>.<turn>``) and the rollout-scoped
``/r/<rollout id>/v1/chat/completions``, so an unmodified agent that forwards no headers is
still attributed to its rollout: a header-less request there gets the request id
``<rollout id>.<turn>`` from a bounded per-rollout turn counter, and the HTTP server span
carries ``gym.rollout.id``. The Responses API (``/v1/responses`` and
``/r/<rollout id>/v1/responses``) is translated to the same ``complete`` by :meth:`respond`,
with the same attribution. Subclasses implement only :meth:`ModelServer.complete`; one whose
upstream speaks the Responses API natively may override :meth:`ModelServer.respond`, and one
whose upstream streams may override the two ``*_events`` methods.

What an OpenAI client expects of any server lives here, once for every model server:
``stream: true`` answers server-sent events (:mod:`rollgym.servers.sse`), ``null`` means
"default" for every optional field, ``GET /v1/models`` lists the served model, and errors have
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``) so an SDK shows the
message.

The legacy completions API (``/v1/completions`` and ``/r/<rollout id>/v1/completions``: a text
or token-id prompt, what RL trainers call for token-in/token-out) is attributed the same way;
a model server serves it by implementing :meth:`ModelServer.complete_text` (and
:meth:`ModelServer.completion_events` to stream), as it serves ``/tokenize`` and
``/detokenize`` (vLLM's routes) by :meth:`ModelServer.tokenize`; one that does not answers 404
with one line naming the route. An implementation that calls an engine may pass the engine's
answer headers on (``x-request-id``...) with :func:`pass_headers`.

``POST /policy_version`` sets the version a server stamps; with ``weights`` the server loads
that checkpoint first (:meth:`ModelServer.load_weights`) with no call in flight
(:mod:`rollgym.servers.weight_gate`), so no call is stamped with a version whose weights did
not make all of it.

Every non-streamed answer carries ``Server-Timing: engine;dur=<ms>``, the seconds the engine
spent on the request, which reach the calling rollout's ``usage.engine_s``
(:mod:`rollgym.server_timing`): what the implementation noted with
``server_timing.note(server_timing.ENGINE, seconds)`` while answering (the simulated engine
notes its own time), else the wall time of :meth:`ModelServer.complete`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar, TypeVar

from fastapi import Body, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.responses import Response, StreamingResponse

import rollgym.policy_versions as policy_versions
import rollgym.server_timing as server_timing
from rollgym.errors import HTTPError
from rollgym.http.model_body import model_body
from rollgym.http.plain_routes import add_post
from rollgym.http.scoped_context import split_scoped_id
from rollgym.http.server import OrjsonResponse
from rollgym.identity import header_text
from rollgym.policy_versions import PolicyVersion, is_version
from rollgym.server_options import ServerKind
from rollgym.servers import responses_api, sse
from rollgym.servers.base import Server
from rollgym.servers.request_ids import TurnCounter, rollout_of_request_id
from rollgym.servers.weight_gate import WeightGate
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate

__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "ModelServer",
    "openai_error",
    "pass_headers",
    "rollout_of_request_id",
]

_TOOL_CHOICE_MODES = ("none", "auto", "required")

#: The body of one model call: a ChatRequest, a CompletionRequest or a Responses dict.
_Body = TypeVar("_Body")


class ChatRequest(BaseModel):
    """An OpenAI chat completion request; fields we do not use are kept and forwarded.

    Every optional field accepts ``null`` as "the default", as OpenAI does.
    """

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @field_validator("tool_choice")
    @classmethod
    def _known_tool_choice(cls, value: Any) -> Any:
        if value is None or value in _TOOL_CHOICE_MODES:
            return value
        if isinstance(value, dict) and isinstance((value.get("function") or {}).get("name"), str):
            return value
        raise ValueError(
            "must be 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": ...}}'
        )

    @property
    def token_limit(self) -> int | None:
        """``max_completion_tokens``, else the older ``max_tokens``; None: no limit."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def forced_tool(self) -> str | None:
        """``"none"``, ``"required"``, a function name, or None (``auto``: the model decides)."""
        choice = self.tool_choice
        if isinstance(choice, dict):
            return str(choice["function"]["name"])
        return choice if choice in ("none", "required") else None

    @property
    def usage_in_stream(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(BaseModel):
    """A legacy completions request (``/v1/completions``): a text prompt, a batch of them, or
    token ids (one list, or a batch of lists), as vLLM takes it; other fields are kept and
    forwarded."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    logprobs: int | None = Field(None, ge=0)

    @property
    def usage_in_stream(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


#: The answer headers an implementation passes on for the request being answered (a fresh dict
#: per request while its answer is made; None outside one).
_PASSED_HEADERS: ContextVar[dict[str, str] | None] = ContextVar(
    "rollgym_passed_headers", default=None
)


def pass_headers(headers: Mapping[str, str]) -> None:
    """Send ``headers`` with the answer of the request being answered (an engine's
    ``x-request-id``, say); the model server's own headers (its version, Server-Timing) win a
    clash. Outside a request, or once a stream's head went out, this does nothing."""
    passed = _PASSED_HEADERS.get()
    if passed is not None:
        passed.update(headers)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    """OpenAI's error body, so an SDK shows ``message`` (``param`` is the field, if known)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": field, "code": None}}


class ModelServer(Server):
    """Base of every model server; subclasses implement :meth:`complete`."""

    kind: ClassVar[ServerKind] = "model"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = TurnCounter()
        #: The policy version the driver (trainer) says is current; None: nothing to stamp.
        self.policy_version: PolicyVersion | None = None
        #: ``time.perf_counter()`` when it last changed (an engine places a change in a generation).
        self.policy_version_set_at = 0.0
        #: When the trainer set it (ns since the epoch): a later-set version replaces it.
        self.policy_version_set_ns = 0
        #: The last floor header read: its calls bring nothing new (most calls repeat it).
        self._floor_seen: str | None = None
        #: The checkpoint the trainer last had loaded (``POST /policy_version`` with
        #: ``weights``); None: the weights the server started with.
        self.weights: str | None = None
        #: Calls in flight finish before a weight swap; calls that arrive during one wait.
        self._gate = WeightGate()

    def served_version(self) -> PolicyVersion | None:
        """The version a request arriving now is stamped with (docs/policy-versions.md).

        Called once per request, on arrival; a simulated engine that plays a trainer bumps
        its version here."""
        return self.policy_version

    def _take_version(self, version: PolicyVersion, set_ns: int) -> None:
        """Hold ``version`` from now on if it was set after the one held (a late push, or the
        floor of a dispatch that left before a newer version was set, changes nothing)."""
        if policy_versions.supersedes(
            version, set_ns, self.policy_version, self.policy_version_set_ns
        ):
            self.policy_version = version
            self.policy_version_set_ns = set_ns
            self.policy_version_set_at = time.perf_counter()

    def _take_floor(self, request: Request) -> None:
        """The version the caller's dispatch carried (``X-Rollgym-Policy-Floor``): this call is
        stamped with it at least, even where the driver's push has not arrived yet."""
        header = request.headers.get(policy_versions.FLOOR_HEADER)
        if not header or header == self._floor_seen:  # taken (or passed over) already
            return
        self._floor_seen = header
        floor = policy_versions.parse_floor(header)
        if floor is not None:
            self._take_version(*floor)

    def _stamp(self, answer: Any, version: PolicyVersion | None) -> dict[str, str] | None:
        """Write the request's version into its answer; the response header that says it too."""
        if version is None:
            return None
        if isinstance(answer, dict):
            answer[policy_versions.ANSWER_KEY] = version
            now = self.policy_version
            if now is not None and now != version:
                answer[policy_versions.ANSWER_END_KEY] = now
        return {policy_versions.HEADER: str(version)}

    # --- what subclasses implement -------------------------------------------------------------

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """Answer one chat completion (an OpenAI ``chat.completion`` object)."""
        raise NotImplementedError

    async def respond(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """Answer one Responses API request (a ``response`` object) through :meth:`complete`.

        Validation errors are a 400 naming the field (``body.input.1.call_id``).
        """
        request = responses_api.parse_request(body)
        chat = ChatRequest.model_validate(responses_api.to_chat_request(request))
        answer = await self.complete(chat, request_id, rollout_id)
        return responses_api.to_response(answer, request, request_id)

    async def chat_events(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        """The SSE stream of a chat completion: by default the finished answer, chunked."""
        answer = await self.complete(request, request_id, rollout_id)
        for chunk in sse.chat_chunks(answer, include_usage=request.usage_in_stream):
            yield chunk

    async def response_events(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        """The SSE stream of a Responses request: by default the finished response, as events."""
        response = await self.respond({**body, "stream": False}, request_id, rollout_id)
        for item in sse.response_events(response):
            yield item

    async def complete_text(
        self, request: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """Answer one legacy completion (an OpenAI ``text_completion`` object)."""
        raise HTTPError(404, f"model server {self.context.name!r} does not serve /v1/completions")

    async def completion_events(
        self, request: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> AsyncIterator[bytes]:
        """The SSE stream of a legacy completion: by default the finished answer, chunked."""
        answer = await self.complete_text(request, request_id, rollout_id)
        for chunk in _completion_chunks(answer, include_usage=request.usage_in_stream):
            yield chunk

    async def load_weights(self, path: str) -> None:
        """Load the checkpoint at ``path`` (the trainer wrote it) into the engine, in place.

        Called with no call in flight and none starting (:class:`WeightGate`); raise
        :class:`~rollgym.errors.HTTPError` with one line saying why when it cannot be loaded,
        leaving the weights served before. A server that cannot load weights says so."""
        raise HTTPError(501, f"model server {self.context.name!r} cannot load weights")

    async def tokenize(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """Answer vLLM's ``/tokenize`` or ``/detokenize`` (``route``) for ``body``."""
        raise HTTPError(404, f"model server {self.context.name!r} does not serve {route}")

    def model_names(self) -> list[str]:
        """What ``GET /v1/models`` lists: the model this server answers as."""
        return [self.context.name]

    def error_body(self, status: int, message: str, field: str | None) -> dict[str, Any]:
        return openai_error(status, message, field)

    # --- routes --------------------------------------------------------------------------------

    def add_routes(self, app: FastAPI) -> None:
        # plain Starlette routes (no dependency solving): the hot path of every rollout
        add_post(app, "/v1/chat/completions", self._chat)
        add_post(app, "/r/{rollout_id:path}/v1/chat/completions", self._scoped_chat)
        add_post(app, "/v1/completions", self._completions)
        add_post(app, "/r/{rollout_id:path}/v1/completions", self._scoped_completions)
        app.post("/tokenize")(self._tokenize)
        app.post("/detokenize")(self._detokenize)
        app.post("/v1/responses")(self._responses)
        app.post("/r/{rollout_id:path}/v1/responses")(self._scoped_responses)
        app.get("/v1/models")(self._models)
        app.get("/r/{rollout_id:path}/v1/models")(self._models)
        app.get(policy_versions.ROUTE)(self._get_policy_version)
        app.post(policy_versions.ROUTE)(self._set_policy_version)

    def _version_answer(self) -> dict[str, object]:
        held: dict[str, object] = {"version": self.policy_version}
        if self.weights is not None:
            held["weights"] = self.weights
        return held

    async def _get_policy_version(self) -> Response:
        return OrjsonResponse(self._version_answer())

    async def _set_policy_version(self, body: Annotated[dict[str, Any], Body()]) -> Response:
        """``{"version": v, "set_ns": t}``: the trainer's current version (an int or a label)
        and when it was set; without ``set_ns``, now. Answers the version held after it.

        With ``"weights": PATH`` the server first loads that checkpoint (:meth:`load_weights`)
        between calls (:class:`WeightGate`), then holds ``v`` whatever its ``set_ns``: the
        weights are the trainer's newest. A load that fails answers 422 with the reason and
        changes nothing. Once begun, a load runs to its end even if the caller goes away."""
        version = body.get("version") if isinstance(body, dict) else None
        if not is_version(version):
            message = f"'version' must be an int or a non-empty string, got {version!r}"
            return OrjsonResponse({"error": message, "field": "version"}, status_code=400)
        set_ns = body.get("set_ns", time.time_ns())
        if not isinstance(set_ns, int) or isinstance(set_ns, bool):
            message = f"'set_ns' must be an int (ns since the epoch), got {set_ns!r}"
            return OrjsonResponse({"error": message, "field": "set_ns"}, status_code=400)
        weights = body.get("weights")
        if weights is None:
            self._take_version(version, set_ns)
            return OrjsonResponse(self._version_answer())
        if not isinstance(weights, str) or not weights:
            message = f"'weights' must be a non-empty path, got {weights!r}"
            return OrjsonResponse({"error": message, "field": "weights"}, status_code=400)
        swap = asyncio.get_running_loop().create_task(self._swap(version, set_ns, weights))
        try:
            await asyncio.shield(swap)
        except HTTPError as exc:
            reason = exc.message
        except Exception as exc:  # an engine's own failure: one line, the old weights kept
            reason = f"{type(exc).__name__}: {exc}"
        else:
            return OrjsonResponse(self._version_answer())
        message = f"could not load {weights}: {reason}; the weights before still serve"
        return OrjsonResponse({"error": message, "field": "weights"}, status_code=422)

    async def _swap(self, version: PolicyVersion, set_ns: int, weights: str) -> None:
        """Load ``weights`` with no call in flight, then hold ``version`` (set at ``set_ns``)."""
        async with self._gate.swap():
            await self.load_weights(weights)
            self.weights = weights
            self.policy_version = version
            self.policy_version_set_ns = max(set_ns, self.policy_version_set_ns)
            self.policy_version_set_at = time.perf_counter()

    async def _models(self) -> Response:
        models = [
            {"id": name, "object": "model", "created": 0, "owned_by": "rollgym"}
            for name in self.model_names()
        ]
        return OrjsonResponse({"object": "list", "data": models})

    def _identify(self, request: Request, rollout_id: str | None) -> tuple[str | None, str | None]:
        """(request id, rollout id) of one call: the header's, or ``<rollout>.<turn>``.

        A scoped path may carry the caller's ``traceparent`` after the rollout id (the
        middleware used it as parent: :mod:`rollgym.http.scoped_context`); it is no part of
        the id."""
        if rollout_id is not None:
            rollout_id = split_scoped_id(rollout_id)[0]
        request_id = request.headers.get(names.HEADER_REQUEST_ID)
        if request_id is not None:
            request_id = header_text(request_id)  # a client's raw UTF-8, read as Latin-1
        if rollout_id is None:
            rollout_id = rollout_of_request_id(request_id)
        elif not request_id:
            request_id = self._turns.next_request_id(rollout_id)
        if rollout_id and gate.http:
            from opentelemetry import trace

            trace.get_current_span().set_attribute(names.ROLLOUT_ID, rollout_id)
        return request_id, rollout_id

    async def _chat(self, request: Request) -> Response:
        body = await model_body(request, ChatRequest)  # not a FastAPI body parameter: cheaper
        self._take_floor(request)
        return await self._answer(body, *self._identify(request, None))

    async def _scoped_chat(self, request: Request) -> Response:
        rollout_id: str = request.path_params["rollout_id"]
        body = await model_body(request, ChatRequest)
        self._take_floor(request)
        return await self._answer(body, *self._identify(request, rollout_id))

    async def _answer(
        self, body: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> Response:
        stream = bool(body.stream)
        return await self._gated(
            stream, self.chat_events, self.complete, body, request_id, rollout_id
        )

    async def _completions(self, request: Request) -> Response:
        body = await model_body(request, CompletionRequest)
        return await self._answer_completion(body, *self._identify(request, None))

    async def _scoped_completions(self, request: Request) -> Response:
        rollout_id: str = request.path_params["rollout_id"]
        body = await model_body(request, CompletionRequest)
        return await self._answer_completion(body, *self._identify(request, rollout_id))

    async def _answer_completion(
        self, body: CompletionRequest, request_id: str | None, rollout_id: str | None
    ) -> Response:
        stream = bool(body.stream)
        events, answer = self.completion_events, self.complete_text
        return await self._gated(stream, events, answer, body, request_id, rollout_id)

    async def _tokenize(self, body: Annotated[dict[str, Any], Body()]) -> Response:
        return await self._passing(self.tokenize("/tokenize", body))

    async def _detokenize(self, body: Annotated[dict[str, Any], Body()]) -> Response:
        return await self._passing(self.tokenize("/detokenize", body))

    async def _passing(self, answering: Awaitable[dict[str, Any]]) -> Response:
        """An answer with the headers the implementation passed on."""
        passed: dict[str, str] = {}
        token = _PASSED_HEADERS.set(passed)
        try:
            answer = await answering
        finally:
            _PASSED_HEADERS.reset(token)
        return OrjsonResponse(answer, headers=passed or None)

    async def _responses(
        self, body: Annotated[dict[str, Any], Body()], request: Request
    ) -> Response:
        self._take_floor(request)
        return await self._answer_responses(body, *self._identify(request, None))

    async def _scoped_responses(
        self, rollout_id: str, body: Annotated[dict[str, Any], Body()], request: Request
    ) -> Response:
        self._take_floor(request)
        return await self._answer_responses(body, *self._identify(request, rollout_id))

    async def _answer_responses(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> Response:
        stream = bool(body.get("stream"))
        events, answer = self.response_events, self.respond
        return await self._gated(stream, events, answer, body, request_id, rollout_id)

    async def _gated(
        self,
        stream: bool,
        events: Callable[[_Body, str | None, str | None], AsyncIterator[bytes]],
        answer: Callable[[_Body, str | None, str | None], Awaitable[dict[str, Any]]],
        body: _Body,
        request_id: str | None,
        rollout_id: str | None,
    ) -> Response:
        """One model call (chat, legacy completion or Responses) through the weight gate: the
        served version read inside it, then ``events`` streamed or ``answer`` timed."""
        if not self._gate.try_enter():
            await self._gate.enter()
        version = self.served_version()
        if stream:
            return await self._streamed(events(body, request_id, rollout_id), version)
        return await self._timed_answer(answer(body, request_id, rollout_id), version)

    async def _streamed(
        self, events: AsyncIterator[bytes], version: PolicyVersion | None
    ) -> Response:
        """A stream's response: its version in a header (its Server-Timing would leave before
        the engine finished, so a stream has none). The call entered the weight gate; it
        leaves when the stream ends or is closed."""
        passed: dict[str, str] = {}
        token = _PASSED_HEADERS.set(passed)
        try:
            first = await sse.primed(self._gate.held_stream(events))
        finally:
            _PASSED_HEADERS.reset(token)
        return StreamingResponse(
            first,
            media_type=sse.MEDIA_TYPE,
            headers={**passed, **(self._stamp(None, version) or {})},
        )

    async def _timed_answer(
        self, answering: Awaitable[dict[str, Any]], version: PolicyVersion | None
    ) -> Response:
        """An answer's response, with the engine seconds it took in ``Server-Timing``. The
        call entered the weight gate; it leaves once answered (stamped)."""
        passed: dict[str, str] = {}
        token = _PASSED_HEADERS.set(passed)
        try:
            with server_timing.collecting() as timings:
                started = time.perf_counter()
                answer = await answering
                headers = _timed(
                    timings, time.perf_counter() - started, self._stamp(answer, version)
                )
        finally:
            _PASSED_HEADERS.reset(token)
            self._gate.leave()
        return OrjsonResponse(answer, headers={**passed, **headers} if passed else headers)


def _timed(
    timings: server_timing.Timings, wall_s: float, headers: dict[str, str] | None
) -> dict[str, str]:
    """``headers`` plus ``Server-Timing: engine;dur=...``: the engine's own seconds where the
    implementation noted them (the simulated engine, an upstream that reports its own), else
    the wall time of the call, which for an engine behind HTTP is its time plus one hop."""
    if timings.get(server_timing.ENGINE) is None:
        timings.add(server_timing.ENGINE, wall_s)
    return {**(headers or {}), **timings.header()}


def _completion_chunks(answer: Mapping[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    """The streamed form of a finished ``text_completion``, as vLLM streams one: a chunk per
    choice (its text whole, its finish reason), the usage in a last chunk without choices
    when asked, then ``[DONE]``."""
    head = {key: answer.get(key) for key in ("id", "created", "model")}
    choices = answer.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, dict):
            piece = {key: value for key, value in choice.items() if key != "prompt_token_ids"}
            yield sse.data_line({**head, "object": "text_completion", "choices": [piece]})
    if include_usage:
        usage = answer.get("usage")
        yield sse.data_line({**head, "object": "text_completion", "choices": [], "usage": usage})
    yield sse.DONE
