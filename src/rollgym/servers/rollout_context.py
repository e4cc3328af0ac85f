"""What one rollout uses to reach the model and the environment.

An agent's ``run`` and an environment's episode ``/run`` play a rollout through the same
:class:`RolloutContext`: ``chat`` for model calls (rollout-scoped URL, ``X-Request-Id:
<rollout id>.<turn>``, the ``gym.model.chat`` span) and ``env`` for the environment session.
The environment side is a protocol, so the episode loop can run against the environment's own
sessions in-process while an agent reaches them over HTTP, with the same loop code.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import rollgym.policy_versions as policy_versions
from rollgym.errors import ServerCallError
from rollgym.http.client import HttpClient, HttpResponse
from rollgym.http.replicas import on_replica, origin
from rollgym.http.scoped_context import scoped_base
from rollgym.servers.chat_content import wire_messages
from rollgym.servers.request_ids import request_id_of
from rollgym.servers.tools import ToolAnswer, ToolMistake, model_arguments, shown_name
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate
from rollgym.trajectory.record import TrajectoryRecorder
from rollgym.trajectory.usage import UsageTally

if TYPE_CHECKING:
    import openai

    from rollgym.servers.base import ServerContext
    from rollgym.servers.openai_sdk import Record

CHAT_ROUTE = "/v1/chat/completions"
SCOPED_CHAT_ROUTE = "/r/{rollout_id}/v1/chat/completions"
#: ``gen_ai.provider.name`` of model calls: every model server speaks the OpenAI API.
PROVIDER = "openai"
#: The environment call whose refusal (4xx) is the task's fault, not the caller's.
SEED_SESSION = "seed_session"


def _refusal(what: str, server: str, response: HttpResponse) -> tuple[str, str | None]:
    """The message and field of an error answer, in rollgym's shape or OpenAI's."""
    data = response.data
    detail = data.get("error") if isinstance(data, dict) else None
    field = data.get("field") if isinstance(data, dict) else None
    if isinstance(detail, dict):  # OpenAI's {"error": {"message", "param", ...}}
        field = field or detail.get("param")
        detail = detail.get("message")
    detail = detail or response.text or "no error message"
    return f"{what} on server {server!r} answered HTTP {response.status}: {detail}", field


class ModelClient:
    """Posts chat completions for one rollout; counts turns for ``X-Request-Id``."""

    def __init__(
        self,
        client: HttpClient,
        server: str,
        base_url: str,
        *,
        rollout_id: str | None,
        model_name: str,
        timeout: float | None,
        policy_floor: str | None = None,
    ) -> None:
        self._client = client
        self._server = server
        self.model_name = model_name
        self.timeout = timeout
        #: The dispatch's policy floor (``X-Rollgym-Policy-Floor``), sent on with every call.
        self.policy_floor = policy_floor
        self._turn = 0
        if rollout_id is not None:
            scoped = f"{base_url}/r/{quote(rollout_id, safe='')}"
            self._url = scoped + CHAT_ROUTE
            self._route = SCOPED_CHAT_ROUTE
            self._prefix: str | None = rollout_id
        else:
            scoped = base_url
            self._url = base_url + CHAT_ROUTE
            self._route = CHAT_ROUTE
            # No rollout: a request id without a "<id>.<turn>" shape, so nothing is attributed.
            self._prefix = None
        #: The OpenAI SDK's ``base_url`` for this rollout (``<model>/r/<rollout id>/v1``).
        self.sdk_base_url = scoped + "/v1"
        #: ``<model>/r/<rollout id>`` (``<model>`` without a rollout).
        self.scoped_url = scoped
        self.rollout_id = rollout_id

    @classmethod
    def of_server(
        cls,
        context: ServerContext,
        server: str,
        *,
        rollout_id: str | None,
        model_name: str | None,
        timeout: float | None,
        policy_floor: str | None = None,
    ) -> ModelClient:
        """The client of model server ``server`` of the run; ``model_name`` defaults to its name;
        ``policy_floor``: the ``X-Rollgym-Policy-Floor`` the rollout's dispatch carried."""
        return cls(
            context.client,
            server,
            context.url_of(server),
            rollout_id=rollout_id,
            model_name=model_name or server,
            timeout=timeout,
            policy_floor=policy_floor,
        )

    def next_request_id(self) -> str:
        """``<rollout id>.<turn>`` of the next call (turns count every call of the rollout,
        through :meth:`chat` or an SDK client); a random id outside a rollout."""
        turn = self._turn
        self._turn += 1
        if self._prefix is None:
            return uuid.uuid4().hex
        return request_id_of(self._prefix, turn)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """One chat completion; ``params`` (sampling, token capture) join the body;
        ``request_id``: the one :meth:`next_request_id` gave the caller (a new one if None)."""
        request_id = request_id or self.next_request_id()
        body: dict[str, Any] = {"model": self.model_name, "messages": wire_messages(messages)}
        if tools:
            body["tools"] = tools
        if params:
            body.update(params)
        headers = {names.HEADER_REQUEST_ID: request_id}
        if self.policy_floor is not None:
            headers[policy_versions.FLOOR_HEADER] = self.policy_floor
        if gate.model:
            from rollgym.telemetry import spans

            with spans.model_chat_span(self.rollout_id, self.model_name, PROVIDER) as span:
                answer = await self._post(body, headers)
                spans.record_model_response(span, answer)
                spans.record_model_messages(span, messages, answer)
                return answer
        return await self._post(body, headers)

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        response = await self._client.post_json(
            self._server, self._url, body, timeout=self.timeout, headers=headers, route=self._route
        )
        if response.status != 200 or not isinstance(response.data, dict):
            message, field = _refusal("chat completion", self._server, response)
            raise ServerCallError(message, status=response.status, field=field)
        return response.data


class EnvSession(Protocol):
    """One environment session, as a rollout sees it (HTTP or in-process)."""

    async def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        """Start the session; returns ``{"session_id", "messages", "tools"}``."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool with arguments the caller built; returns its text output. An unknown
        tool or arguments that do not fit are refused (:class:`ServerCallError`): a bug of
        the caller, which fails the rollout."""
        ...

    async def call_model_tool(
        self, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        """Run one tool call as the model wrote it (``arguments``: its ``function.arguments``
        text; ``call_id``: its id, which the tool span carries). The model's mistakes come
        back as the answer's ``output`` (``error: ...``) with ``error`` naming the kind; only
        the environment's own faults raise."""
        ...

    async def verify(self, answer: str | None) -> dict[str, Any]:
        """Score the answer and end the session; returns ``{"reward", "details"}``."""
        ...


class SessionBase:
    """What both :class:`EnvSession` implementations share, so they refuse alike: the session
    id once seeded, and which refusals are the task's fault."""

    def __init__(self) -> None:
        self.session_id: str | None = None

    def _session(self) -> str:
        if self.session_id is None:
            raise ServerCallError("environment session used before seed()")
        return self.session_id

    @staticmethod
    def _refused(message: str, what: str, status: int, field: str | None) -> ServerCallError:
        """A 4xx answer to ``seed_session`` means the environment rejected the task itself."""
        bad_input = what == SEED_SESSION and 400 <= status < 500
        return ServerCallError(message, status=status, field=field, bad_input=bad_input)


class HttpEnvSession(SessionBase):
    """An :class:`EnvSession` on an environment server, over the process's HttpClient."""

    def __init__(
        self,
        client: HttpClient,
        server: str,
        base_url: str,
        *,
        rollout_id: str | None,
        timeout: float | None,
    ) -> None:
        super().__init__()
        self._client = client
        self._server = server
        self._base_url = base_url
        #: Set once the session exists: its calls go to the replica that created it.
        self._pinned = False
        self._rollout_id = rollout_id
        self._timeout = timeout

    async def _post(self, path: str, route: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        response = await self._client.post_json(
            self._server,
            self._base_url + path,
            body,
            timeout=self._timeout,
            route=route,
            pinned=self._pinned,
        )
        if response.status != 200 or not isinstance(response.data, dict):
            message, field = _refusal(what, self._server, response)
            raise self._refused(message, what, response.status, field)
        if response.replica is not None and not self._pinned:
            # Session affinity: the session lives in this replica's memory; stay there.
            self._base_url = on_replica(self._base_url, origin(self._base_url), response.replica)
            self._pinned = True
        return response.data

    async def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        body = {"rollout_id": self._rollout_id, "task": task}
        seeded = await self._post("/seed_session", "/seed_session", body, SEED_SESSION)
        self.session_id = seeded.get("session_id")
        return seeded

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        body = {"session_id": self._session(), "arguments": arguments}
        answer = await self._post(
            f"/tools/{quote(name, safe='')}", "/tools/{name}", body, f"tool {name!r}"
        )
        return str(answer.get("output", ""))

    async def call_model_tool(
        self, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        body = {"session_id": self._session(), "name": name, "arguments": arguments}
        if call_id is not None:
            body["call_id"] = call_id
        answer = await self._post(
            "/model_tool_call", "/model_tool_call", body, f"tool {shown_name(name)}"
        )
        error = answer.get("error")
        return ToolAnswer(str(answer.get("output", "")), error if isinstance(error, str) else None)

    async def verify(self, answer: str | None) -> dict[str, Any]:
        body = {"session_id": self._session(), "answer": answer}
        return await self._post("/verify", "/verify", body, "verify")


class RecordingEnvSession:
    """An :class:`EnvSession` that writes each tool call and the verification into the
    rollout's trajectory, in the order they happen."""

    def __init__(self, inner: EnvSession, recorder: TrajectoryRecorder) -> None:
        self._inner = inner
        self._recorder = recorder

    async def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        return await self._inner.seed(task)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        output = await self._inner.call_tool(name, arguments)
        self._recorder.tool_call(name, arguments, output)
        return output

    async def call_model_tool(
        self, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        answer = await self._inner.call_model_tool(name, arguments, call_id)
        self._recorder.tool_call(
            name, _recorded_arguments(name, arguments, answer), answer.output, error=answer.error
        )
        return answer

    async def verify(self, answer: str | None) -> dict[str, Any]:
        verdict = await self._inner.verify(answer)
        self._recorder.verify(answer, verdict)
        return verdict


def _recorded_arguments(name: str, written: object, answer: ToolAnswer) -> object:
    """A model tool call's arguments as its trajectory turn keeps them: the object the tool
    ran with, or, for the model's mistake, what the model wrote (the text as it is)."""
    if answer.error is not None:
        return written
    try:
        return model_arguments(name, written)
    except ToolMistake:  # the environment ran it, so it parsed; kept as written all the same
        return written


def _current_traceparent() -> str | None:
    """The current span's ``traceparent``, or None with tracing off (nothing is injected)."""
    if not gate.tracing:
        return None
    from rollgym.telemetry.context import current_carrier

    return current_carrier().get("traceparent")


class RolloutContext:
    """The handle an agent gets for one rollout: its id, the model, the environment session.

    ``sampling`` (the server's options merged with the row's ``sampling``) joins every model
    call; ``trajectory``, when the run asked for one, records every call in order.
    """

    def __init__(
        self,
        rollout_id: str | None,
        model: ModelClient | None,
        env: EnvSession | None,
        *,
        sampling: dict[str, Any] | None = None,
        trajectory: TrajectoryRecorder | None = None,
    ) -> None:
        self.rollout_id = rollout_id
        self._model = model
        if trajectory is not None and env is not None:
            env = RecordingEnvSession(env, trajectory)
        self._env = env
        self.trajectory = trajectory
        #: Tokens and model calls of this rollout (``usage`` in rollouts.jsonl), always kept.
        self.usage = UsageTally()
        sampling = sampling or {}
        self._params = {**sampling, **(trajectory.request_fields() if trajectory else {})}
        if "top_logprobs" in sampling:  # the agent's or row's choice wins over capture's 0
            self._params["top_logprobs"] = sampling["top_logprobs"]
        self._sdk_clients: list[Any] = []

    @property
    def model_base_url(self) -> str:
        """The rollout-scoped OpenAI base URL to hand an agent's own client (one that sends
        no tracing headers): ``<model>/r/<rollout id>/<traceparent>/v1``. Its calls are
        attributed to the rollout by the path and join the rollout's trace under the span
        current when this is read (``gym.rollout`` in an agent's ``run``); with tracing off
        it is ``<model>/r/<rollout id>/v1``."""
        model = self._model_client()
        return scoped_base(model.scoped_url, _current_traceparent()) + "/v1"

    def _model_client(self) -> ModelClient:
        if self._model is None:
            raise ServerCallError(
                "this server has no 'model' option, so a rollout cannot call a model"
            )
        return self._model

    def async_openai(self) -> openai.AsyncOpenAI:
        """An OpenAI SDK ``AsyncOpenAI`` client for this rollout's model server.

        Its base URL is the rollout-scoped model URL; each request carries ``X-Request-Id:
        <rollout id>.<turn>`` and the rollout's ``traceparent`` and is a ``gym.model.chat``
        span. Closed when the rollout ends. Needs the ``openai`` package.
        """
        from rollgym.servers.openai_sdk import async_client

        client = async_client(self._model_client(), self._sdk_record())
        self._sdk_clients.append(client)
        return client

    def openai(self) -> openai.OpenAI:
        """The blocking ``OpenAI`` twin of :meth:`async_openai` (call it from a thread: it
        would block the event loop)."""
        from rollgym.servers.openai_sdk import sync_client

        client = sync_client(self._model_client(), self._sdk_record())
        self._sdk_clients.append(client)
        return client

    async def aclose(self) -> None:
        """Close the SDK clients this rollout made; the server calls it when the rollout ends."""
        clients, self._sdk_clients = self._sdk_clients, []
        for client in clients:
            closed = client.close()
            if closed is not None:
                await closed

    @property
    def env(self) -> EnvSession:
        if self._env is None:
            raise ServerCallError(
                "this server has no 'environment' option, so a rollout has no environment"
            )
        return self._env

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """One model call: the model server's OpenAI chat completion answer."""
        model = self._model_client()
        request_id = model.next_request_id()
        started = time.perf_counter()
        answer = await model.chat(messages, tools, self._params, request_id=request_id)
        self.record_model_call(
            {"messages": messages, "tools": tools, **self._params},
            answer,
            seconds=time.perf_counter() - started,
            request_id=request_id,
        )
        return answer

    def _sdk_record(self) -> Record:
        """What an SDK client calls with each model call: the usage tally always, and the
        trajectory when asked."""
        return self.record_model_call

    def record_model_call(
        self,
        request: dict[str, Any],
        answer: dict[str, Any],
        *,
        seconds: float | None = None,
        request_id: str | None = None,
    ) -> None:
        """Count one model call made by any client in the usage, and put it into the
        trajectory when the rollout records one.

        ``request`` is the body sent (``messages``, ``tools``, sampling parameters), ``answer``
        the ``chat.completion`` object as plain data, ``seconds`` how long the call took
        (its ``usage.model_s``), ``request_id`` the ``X-Request-Id`` it was sent with.
        """
        if isinstance(answer, dict):
            self.usage.add(answer, seconds)
        if self.trajectory is not None:
            self.trajectory.model_call(request, answer, request_id=request_id)
