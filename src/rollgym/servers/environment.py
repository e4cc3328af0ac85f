"""The environment server base: task state, tools, verification, aggregates, optional episodes.

Writing an environment is one small class::

    class Echo(Environment):
        async def seed(self, task):
            return SessionState(messages=[{"role": "user", "content": task["text"]}])

        @tool
        async def shout(self, state, text: str) -> str:
            "Upper-case a text."
            return text.upper()

        async def verify(self, state, answer):
            return 1.0 if answer == state.messages[0]["content"].upper() else 0.0

The base owns the HTTP contract (``/seed_session``, ``/tools/{name}``, ``/model_tool_call``,
``/verify``, ``/aggregate_metrics``, and the episode ``/run`` when the options name a
``model``), the sessions (with a TTL so a dead agent leaks nothing), the spans (``gym.env.tool``
around a tool, ``gym.verify`` around verification, both carrying the rollout id the session was
seeded with, ``gym.rollout`` around an episode) and the running aggregates.

Two ways to call a tool, because whose mistake a bad call is differs: ``/tools/{name}`` (and
:meth:`Environment.run_tool`) takes arguments the caller built itself, so an unknown tool or
arguments that do not fit are refused (404, 400: the caller's bug); ``/model_tool_call`` (and
:meth:`Environment.call_model_tool`) takes a tool call as the model wrote it, so the same
mistakes, and arguments that are not JSON or not an object, are answered to the model as the
tool's output (``error: ...``) and the episode goes on.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

import rollgym.server_timing as server_timing
from rollgym.errors import HTTPError
from rollgym.http.model_body import model_body
from rollgym.http.plain_routes import add_post
from rollgym.http.server import OrjsonResponse
from rollgym.identity import rollout_id_of_episode
from rollgym.rewards import is_reward, plain_number
from rollgym.server_options import ServerKind, ServerOptions
from rollgym.servers.answers import SESSION_FIELD, check_reward, guarded, json_object
from rollgym.servers.base import Server, ServerContext
from rollgym.servers.env_metrics import EnvAggregates
from rollgym.servers.environment_options import EnvironmentOptions
from rollgym.servers.episode_loop import play_tool_loop
from rollgym.servers.local_session import LocalEnvSession
from rollgym.servers.rollout_context import ModelClient, RolloutContext
from rollgym.servers.rollout_span import answer_rollout_route
from rollgym.servers.sessions import Session, SessionStore
from rollgym.servers.tools import (
    INVALID_ARGUMENTS,
    UNKNOWN_TOOL,
    ToolAnswer,
    ToolArgumentsError,
    ToolMistake,
    ToolSpec,
    model_arguments,
    shown_name,
    tools_of,
)
from rollgym.telemetry.groups import gate
from rollgym.trajectory.record import attach
from rollgym.trajectory.usage import attach_usage


def unknown_session(session_id: str) -> HTTPError:
    """The 404 for a session the environment does not hold (never seeded, expired, or lost
    with a restarted process): it names ``session_id``, so an agent retries the rollout."""
    return HTTPError(404, f"unknown or expired session {session_id!r}", field=SESSION_FIELD)


#: The rollout whose session is being seeded: ``seed`` takes the task only (the API users
#: write), and the few environments that need the rollout read it here.
_SEEDING_ROLLOUT: ContextVar[str | None] = ContextVar("rollgym_seeding_rollout", default=None)


@dataclass
class SessionState:
    """What ``seed`` returns: the prompt messages, plus whatever the environment keeps."""

    messages: list[dict[str, Any]]
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A reward with details (``verify`` may also return a bare float)."""

    reward: float
    details: dict[str, Any] = field(default_factory=dict)


class SeedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rollout_id: str | None = None
    task: dict[str, object]


class ToolRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    arguments: dict[str, object] = Field(default_factory=dict)


class ModelToolCallRequest(BaseModel):
    """A tool call as the model wrote it: ``arguments`` is its ``function.arguments``, the
    JSON text (or any value an engine handed already parsed)."""

    model_config = ConfigDict(extra="forbid")
    session_id: str
    name: str
    arguments: object = None
    #: The model's id of the call (``tool_calls[].id``), for the span's ``gen_ai.tool.call.id``.
    call_id: str | None = None


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    answer: str | None = None


class Environment(Server):
    """Base of every environment server; subclasses implement ``seed``, tools and ``verify``."""

    kind: ClassVar[ServerKind] = "environment"
    Options: ClassVar[type[ServerOptions]] = EnvironmentOptions
    options: EnvironmentOptions
    #: The tools declared with ``@tool`` on this class, by name (filled per subclass).
    tools: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.tools = tools_of(cls)

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        options = self.options
        self.sessions: SessionStore[SessionState] = SessionStore(
            options.session_ttl_s, on_expire=self.on_session_expired
        )
        self.aggregates = EnvAggregates(pass_threshold=options.pass_threshold)
        self._tool_schemas = [spec.openai_schema() for spec in self.tools.values()]

    @property
    def env_options(self) -> EnvironmentOptions:
        """``self.options``, typed as the base's options (kept for subclasses that call it)."""
        return self.options

    # --- what a subclass writes ---------------------------------------------------------------

    async def seed(self, task: dict[str, Any]) -> SessionState:
        """Start a task: prompt messages and state. Raise ValueError/KeyError for a bad task."""
        raise NotImplementedError

    async def verify(self, state: SessionState, answer: str | None) -> float | Verdict:
        """Score the final answer (and anything recorded in ``state``)."""
        raise NotImplementedError

    def on_session_expired(self, state: SessionState) -> None:
        """Hook: a session nobody verified was dropped; free what its state holds."""

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """One episode for ``/run``; default: the shared multi-turn tool loop."""
        return await play_tool_loop(rollout, task, max_turns=self.options.max_turns)

    # --- the operations, shared by the HTTP routes and in-process episodes --------------------

    def seeding_rollout_id(self) -> str | None:
        """Inside :meth:`seed`: the rollout the session is for (None when none was named), for
        an environment that keys something of its own by it (a sandbox, a foreign episode)."""
        return _SEEDING_ROLLOUT.get()

    async def open_session(self, rollout_id: str | None, task: dict[str, Any]) -> dict[str, object]:
        if gate.env:
            from rollgym.telemetry import spans

            with spans.env_seed_span(rollout_id):
                return await self._open_session(rollout_id, task)
        return await self._open_session(rollout_id, task)

    async def _open_session(
        self, rollout_id: str | None, task: dict[str, Any]
    ) -> dict[str, object]:
        token = _SEEDING_ROLLOUT.set(rollout_id)
        try:
            state = await self.seed(task)
        except HTTPError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise HTTPError(
                400, f"environment {self.context.name!r} rejected the task: {detail}", field="task"
            ) from None
        finally:
            _SEEDING_ROLLOUT.reset(token)
        session = self.sessions.create(rollout_id, state)
        self.aggregates.record_seed()
        return {
            "session_id": session.session_id,
            "messages": state.messages,
            "tools": self._tool_schemas,
        }

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        session = self._live(session_id)
        spec = self.tools.get(name)
        if spec is None:
            raise HTTPError(
                404, f"unknown tool {name!r}; tools: {sorted(self.tools)}", field="tool"
            )
        try:
            args = spec.parse(arguments)
        except ToolArgumentsError as exc:
            self.aggregates.record_tool(name, ok=False)
            raise HTTPError(400, str(exc), field=exc.field) from None
        if gate.env:
            from rollgym.telemetry import spans

            with spans.env_tool_span(session.rollout_id, name) as span:
                output = await self._invoke(spec, session.state, args)
                spans.record_tool_call(span, arguments, output)
                return output
        return await self._invoke(spec, session.state, args)

    async def call_model_tool(
        self, session_id: str, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        """Run a tool call as the model wrote it (``arguments``: its JSON text).

        The model's mistakes (arguments not JSON, not an object, not fitting the schema, an
        unknown tool) come back as a :class:`ToolAnswer` whose ``output`` tells the model and
        whose ``error`` names the kind; the ``gym.env.tool`` span carries the kind as
        ``gym.env.tool.model_error`` and no error status (the environment did not fail). An
        unknown session or a tool that raises is still the environment's fault (HTTPError).
        """
        session = self._live(session_id)
        if gate.env:
            from rollgym.telemetry import spans

            with spans.env_tool_span(session.rollout_id, name[:128], call_id) as span:
                answer = await self.answer_tool_call(session.state, name, arguments, call_id)
                if answer.error is not None:
                    spans.record_tool_model_error(span, answer.error)
                spans.record_tool_call(span, arguments, answer.output)
                return answer
        return await self.answer_tool_call(session.state, name, arguments, call_id)

    async def finish(self, session_id: str, answer: str | None) -> dict[str, object]:
        session = self.sessions.pop(session_id)
        if session is None:
            raise unknown_session(session_id)
        if gate.verify:
            from rollgym.telemetry import spans

            with spans.verify_span(session.rollout_id) as span:
                verdict = await self._verdict(session.state, answer)
                spans.record_evaluation(span, verdict.reward)
        else:
            verdict = await self._verdict(session.state, answer)
        self.aggregates.record_verify(verdict.reward)
        return {"reward": verdict.reward, "details": verdict.details}

    def aggregate_metrics(self) -> dict[str, object]:
        return self.aggregates.as_json(
            open_sessions=len(self.sessions), expired_sessions=self.sessions.expired
        )

    # --- internals --------------------------------------------------------------------------

    def _live(self, session_id: str) -> Session[SessionState]:
        session = self.sessions.get(session_id)
        if session is None:
            raise unknown_session(session_id)
        return session

    async def answer_tool_call(
        self, state: SessionState, name: str, arguments: object, call_id: str | None
    ) -> ToolAnswer:
        """The answer to one model-written tool call (the span around it is the caller's):
        this environment's own tools; an environment whose tools live elsewhere (another
        package's server) answers it there."""
        try:
            spec = self.tools.get(name)
            if spec is None:
                raise ToolMistake(
                    UNKNOWN_TOOL, f"unknown tool {shown_name(name)}; tools: {sorted(self.tools)}"
                )
            try:
                args = spec.parse(model_arguments(name, arguments))
            except ToolArgumentsError as exc:
                raise ToolMistake(INVALID_ARGUMENTS, str(exc)) from None
            try:
                return ToolAnswer(await self._invoke(spec, state, args))
            except HTTPError as exc:
                # A tool that refuses its arguments itself (400/404 naming ``arguments...``)
                # is told to the model like a schema failure; any other refusal is its own.
                if exc.status in (400, 404) and (exc.field or "").startswith("arguments"):
                    raise ToolMistake(INVALID_ARGUMENTS, exc.message) from None
                raise
        except ToolMistake as mistake:
            self.aggregates.record_mistake()
            return mistake.answer()

    async def _invoke(self, spec: ToolSpec, state: SessionState, args: BaseModel) -> str:
        try:
            output = await spec.invoke(self, state, args)
        except HTTPError:
            self.aggregates.record_tool(spec.name, ok=False)
            raise
        except Exception as exc:
            self.aggregates.record_tool(spec.name, ok=False)
            raise HTTPError(
                500, f"tool {spec.name!r} failed: {type(exc).__name__}: {exc}"
            ) from None
        self.aggregates.record_tool(spec.name, ok=True)
        return output

    async def _verdict(self, state: SessionState, answer: str | None) -> Verdict:
        result = await self.verify(state, answer)
        verdict = result if isinstance(result, Verdict) else Verdict(reward=result)
        reward = plain_number(verdict.reward)
        if reward is not verdict.reward:  # NumPy's float32...: the Python number it equals
            verdict = replace(verdict, reward=reward)  # type: ignore[arg-type]
        if not is_reward(reward):
            raise HTTPError(
                500,
                f"environment {self.context.name!r} verified to a non-numeric reward {reward!r}",
            )
        return verdict

    # --- HTTP -------------------------------------------------------------------------------

    async def on_startup(self) -> None:
        self.sessions.start_sweeper()

    async def on_shutdown(self) -> None:
        await self.sessions.stop_sweeper()

    def add_routes(self, app: FastAPI) -> None:
        # The rollout's routes are plain Starlette routes reading their bodies with model_body
        # (pydantic-core straight from the bytes): the same 400s as FastAPI body parameters,
        # a fraction of the CPU per request (bench/body_validation.py).
        add_post(app, "/seed_session", self._seed_route)
        add_post(app, "/tools/{name}", self._tool_route)
        add_post(app, "/model_tool_call", self._model_tool_route)
        add_post(app, "/verify", self._verify_route)
        app.post("/aggregate_metrics")(self._aggregate_route)
        if self.options.model is not None:
            add_post(app, "/run", self._episode_route)

    # Each session route answers with the sandbox seconds it spent (Server-Timing), which
    # the agent's client adds to the rollout's usage (rollgym/server_timing.py).

    async def _seed_route(self, request: Request) -> Response:
        body = await model_body(request, SeedRequest)
        with server_timing.collecting() as timings:
            seeded = await self.open_session(body.rollout_id, body.task)
        return OrjsonResponse(seeded, headers=timings.header())

    async def _tool_route(self, request: Request) -> Response:
        name: str = request.path_params["name"]
        body = await model_body(request, ToolRequest)
        with server_timing.collecting() as timings:
            output = await self.run_tool(body.session_id, name, body.arguments)
        return OrjsonResponse({"output": output}, headers=timings.header())

    async def _model_tool_route(self, request: Request) -> Response:
        body = await model_body(request, ModelToolCallRequest)
        with server_timing.collecting() as timings:
            answer = await self.call_model_tool(
                body.session_id, body.name, body.arguments, body.call_id
            )
        return OrjsonResponse(
            {"output": answer.output, "error": answer.error}, headers=timings.header()
        )

    async def _verify_route(self, request: Request) -> Response:
        body = await model_body(request, VerifyRequest)
        with server_timing.collecting() as timings:
            verdict = await self.finish(body.session_id, body.answer)
        return OrjsonResponse(verdict, headers=timings.header())

    async def _aggregate_route(self) -> Response:
        return OrjsonResponse(self.aggregate_metrics())

    async def _episode_route(self, request: Request) -> Response:
        body = await json_object(request)
        task = body.get("task")
        if not isinstance(task, dict):
            raise HTTPError(400, "an episode body needs 'task', a JSON object", field="task")
        rollout_id = rollout_id_of_episode(body)
        play = functools.partial(self._episode, rollout_id, task)
        return await answer_rollout_route(request, rollout_id, self.context.name, play)

    async def _episode(
        self,
        rollout_id: str | None,
        task: dict[str, Any],
        capture: str | None,
        floor: str | None = None,
    ) -> object:
        options = self.options
        model_server = options.model
        assert model_server is not None
        who = f"environment {self.context.name!r} episode"
        env = LocalEnvSession(self, rollout_id)

        async def attempt() -> object:
            model = ModelClient.of_server(
                self.context,
                model_server,
                rollout_id=rollout_id,
                model_name=options.model_name,
                timeout=options.request_timeout_s,
                policy_floor=floor,
            )
            sampling = options.sampling_for(task.get("sampling"))
            trajectory = options.recorder_for(capture)
            rollout = RolloutContext(
                rollout_id, model, env, sampling=sampling, trajectory=trajectory
            )
            try:
                with server_timing.collecting(rollout.usage.timings):
                    played = await self.play_episode(rollout, task)
                answer = attach(played, trajectory)
                return attach_usage(answer, rollout.usage)
            finally:
                await rollout.aclose()

        try:
            answer = await guarded(who, attempt())
        finally:
            env.close()
        return check_reward(answer, who)
