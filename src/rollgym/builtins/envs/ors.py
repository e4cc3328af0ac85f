"""``impl: ors``: an environment written with OpenReward (ORS), played as a rollgym environment.

The ORS environment runs unchanged: on a server the user runs (``ors_url:``, e.g.
``Server([MyEnv]).run()``), or one rollgym starts itself in the interpreter that has
openreward (``ors_environment: module:object``, :mod:`rollgym.builtins.envs.ors_host`). Each
rollgym session is one ORS session (:mod:`rollgym.builtins.envs.ors_wire`), mapped so the
built-in ``tool_loop`` agent, the environment's own episode ``/run`` and the simulated model
play it like any environment:

- the task is one of the environment's own tasks: ``{"index": i}`` (in the ``split`` option's
  split, or the row's ``split``), or ``{"task_spec": {...}}`` given whole;
- seeding a session creates the ORS session with that task; the prompt is the environment's
  ``get_prompt()``; the tools are the session's (``task_tools``), each an OpenAI function whose
  parameters are the tool's input schema;
- each tool call is one ``/call``: its blocks are the tool's output, its ``reward`` is kept,
  and once it says ``finished`` the episode is over (the session is closed, later calls are
  told so); a call the environment refuses (unknown tool, input that fails its model) is the
  model's mistake, a tool that raises fails the rollout;
- verifying answers the rewards the calls carried (the last one, or their sum); an environment
  with a ``@terminal`` tool gets the model's final answer through it first, as openreward's
  harness does.

The ORS session is owned: closed at verification, when the episode ``/run`` ends however it
ends, when a tool call fails, when the rollgym session expires unused, and at shutdown.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

import aiohttp
from pydantic import Field, model_validator

from rollgym.builtins.envs.foreign import (
    check_one_place,
    fetch_setup_json,
    refused_over_http,
)
from rollgym.builtins.envs.ors_host import OrsProcess, StartFailed, default_python
from rollgym.builtins.envs.ors_wire import CallResult, OrsError, OrsSession
from rollgym.servers import (
    INVALID_ARGUMENTS,
    UNKNOWN_TOOL,
    Environment,
    EnvironmentOptions,
    HTTPError,
    RolloutContext,
    ServerContext,
    ServerOptions,
    SessionState,
    SetupProblem,
    ToolAnswer,
    ToolMistake,
    Verdict,
    gate,
    model_arguments,
    unknown_session,
)

SYSTEM_PROMPT = (
    "You solve the task with the tools offered. Each tool's answer is the environment's. When "
    "the environment says the episode is over, reply with your final answer."
)
#: How ``/call`` refusals map onto the model's mistakes (openreward's RunToolError reasons).
_MISTAKES = {"not_found": UNKNOWN_TOOL, "input_validation": INVALID_ARGUMENTS}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class OrsOptions(EnvironmentOptions):
    """Where the ORS environment is, and which of its tasks and rewards a rollout plays."""

    ors_url: str | None = Field(
        None, description="Base URL of an ORS (openreward) environment server you run."
    )
    ors_environment: str | None = Field(
        None,
        description="'module:object': the openreward Environment class (or a list of them, or "
        "a Server) rollgym serves itself, importable from the working directory.",
    )
    python: str = Field(
        default_factory=default_python,
        description="The Python that has openreward (for ors_environment; default: "
        "scripts/test.sh's venv ~/.cache/rollgym-openreward/venv, else python3).",
    )
    env_name: str | None = Field(
        None, description="Which environment of the server (default: the first it lists)."
    )
    split: str = Field("train", description="The split of a row that gives only an 'index'.")
    reward: Literal["last", "sum"] = Field(
        "last", description="The episode's reward: the last reward a tool gave, or their sum."
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="The system message of each episode.")
    start_timeout_s: float = Field(
        60.0, gt=0, description="Time for a served environment to answer."
    )
    answer_timeout_s: float = Field(
        60.0, gt=0, description="Time for one session start, prompt or tool call to answer."
    )

    @model_validator(mode="after")
    def _one_place(self) -> OrsOptions:
        check_one_place(self.ors_url, "ors_url", self.ors_environment, "ors_environment")
        return self


class OrsEnv(Environment):
    """An ORS environment's sessions as rollgym sessions (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = OrsOptions

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        options = self.ors_options
        self._process: OrsProcess | None = None
        if options.ors_environment is not None:
            self._key = "ors_environment"
            self.where = f"ORS environment {options.ors_environment!r}"
            self._process = self._start(options.ors_environment)
            self._base_url = self._process.url
        else:
            assert options.ors_url is not None
            self._key = "ors_url"
            self._base_url = options.ors_url.rstrip("/")
            self.where = f"ORS server {self._base_url}"
        try:
            self._env_name = self._pick_environment()
        except SetupProblem:
            self._stop_process()
            raise
        self._http: aiohttp.ClientSession | None = None
        #: The ORS session of each live rollgym session, by session id: what must be closed.
        self._wires: dict[str, OrsSession] = {}
        #: Every ORS session not closed yet, those still being seeded included: what a
        #: shutdown closes (a driver killed mid-seed leaves no session behind).
        self._unclosed: set[OrsSession] = set()
        self._closing: set[asyncio.Task[bool]] = set()
        #: Sessions closed, and closes the server refused (``aggregate_metrics``).
        self.closes = {"closed": 0, "refused": 0}

    @property
    def ors_options(self) -> OrsOptions:
        assert isinstance(self.options, OrsOptions)
        return self.options

    # --- start-up and shutdown ------------------------------------------------------------------

    def _start(self, target: str) -> OrsProcess:
        options = self.ors_options
        try:
            process = OrsProcess(self.context.name, target, options.python)
            process.wait_ready(options.start_timeout_s)
        except StartFailed as exc:
            raise SetupProblem(self._key, f"{self.where}: {exc}") from None
        return process

    def _pick_environment(self) -> str:
        """The server's environments (``/list_environments``), read once at start-up: a
        server that does not answer it is not an ORS server, said before the first rollout."""
        listed = fetch_setup_json(
            self._base_url,
            "/list_environments",
            self.ors_options.start_timeout_s,
            self.where,
            self._key,
        )
        if (
            not isinstance(listed, list)
            or not listed
            or not all(isinstance(n, str) for n in listed)
        ):
            raise SetupProblem(
                self._key,
                f"{self.where}: not an ORS server: GET /list_environments answered "
                f"{str(listed)[:120]!r}, not a list of environment names",
            )
        wanted = self.ors_options.env_name
        if wanted is None:
            return str(listed[0])
        if wanted.lower() not in listed:
            raise SetupProblem("env_name", f"{self.where} has no environment {wanted!r}: {listed}")
        return wanted.lower()

    def _stop_process(self) -> None:
        if self._process is not None:
            self._process.stop()

    async def on_startup(self) -> None:
        await super().on_startup()
        # One session's requests are sequential; rollouts in flight each need a connection.
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
            self._wires.clear()
            for wire in list(self._unclosed):
                self._close_later(wire)
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
        finally:
            await asyncio.to_thread(self._stop_process)

    def aggregate_metrics(self) -> dict[str, object]:
        return {**super().aggregate_metrics(), "ors_sessions": dict(self.closes)}

    # --- sessions ---------------------------------------------------------------------------------

    async def open_session(self, rollout_id: str | None, task: dict[str, Any]) -> dict[str, object]:
        seeded = await super().open_session(rollout_id, task)
        session_id = str(seeded["session_id"])
        session = self.sessions.get(session_id)
        assert session is not None  # created just now
        session.state.data["session_id"] = session_id
        self._wires[session_id] = session.state.data["wire"]
        seeded["tools"] = session.state.data["tools"]
        return seeded

    async def seed(self, task: dict[str, Any]) -> SessionState:
        chosen = _task_of(task, self.ors_options.split)
        if self._http is None:
            raise HTTPError(503, f"environment {self.context.name!r} is not started")
        wire = OrsSession(
            self._http, self._base_url, self._env_name, self.ors_options.answer_timeout_s
        )
        self._unclosed.add(wire)
        try:
            await wire.open(chosen)
            prompt = await wire.prompt()
        except OrsError as exc:
            await asyncio.shield(self._close(wire))
            if exc.step == "create" and exc.answered in (400, 422):
                raise ValueError(f"the ORS server refused it: {exc}") from None
            raise self._failed(exc) from None
        except BaseException:
            await asyncio.shield(self._close(wire))
            raise
        tools = [_function(entry) for entry in wire.tools]
        messages = [
            {"role": "system", "content": self.ors_options.system_prompt},
            {"role": "user", "content": prompt},
        ]
        data: dict[str, Any] = {
            "wire": wire,
            "tools": tools,
            "tool_names": frozenset(str(t["name"]) for t in wire.tools),
            "rewards": [],
            "calls": 0,
            "finished": False,
        }
        return SessionState(messages=messages, data=data)

    def on_session_expired(self, state: SessionState) -> None:
        self._release(state.data["session_id"])

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """The shared tool loop; the ORS session closed however the episode ends."""
        try:
            return await super().play_episode(rollout, task)
        finally:
            session_id = getattr(rollout.env, "session_id", None)
            if isinstance(session_id, str):
                self._release(session_id)

    def _release(self, session_id: str) -> None:
        """Close the session in a task of its own: a cancelled episode's ``finally`` cannot
        await, and the close must happen all the same."""
        wire = self._wires.pop(session_id, None)
        if wire is not None:
            self._close_later(wire)

    def _close_later(self, wire: OrsSession) -> None:
        if wire.closed:
            return
        task = asyncio.get_running_loop().create_task(self._close(wire))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, wire: OrsSession) -> bool:
        if wire.closed:
            return True
        try:
            taken = await wire.close()
        finally:
            self._unclosed.discard(wire)
        self.closes["closed" if taken else "refused"] += 1
        return taken

    # --- tools ------------------------------------------------------------------------------------

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        return refused_over_http(await self.call_model_tool(session_id, name, arguments))

    async def call_model_tool(
        self, session_id: str, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        session = self.sessions.get(session_id)
        if session is None:
            raise unknown_session(session_id)
        if gate.env:
            from rollgym.servers import spans

            with spans.env_tool_span(session.rollout_id, name[:128], call_id) as span:
                answer = await self._call(session_id, session.state, name, arguments)
                if answer.error is not None:
                    spans.record_tool_model_error(span, answer.error)
                spans.record_tool_call(span, arguments, answer.output)
                return answer
        return await self._call(session_id, session.state, name, arguments)

    async def _call(
        self, session_id: str, state: SessionState, name: str, arguments: object
    ) -> ToolAnswer:
        tools: frozenset[str] = state.data["tool_names"]
        if name not in tools:
            self.aggregates.record_mistake()
            return ToolAnswer(
                f"error: unknown tool {name[:64]!r}; tools: {sorted(tools)}", UNKNOWN_TOOL
            )
        try:
            args = model_arguments(name, arguments)
        except ToolMistake as mistake:
            self.aggregates.record_mistake()
            return mistake.answer()
        if state.data["finished"]:
            return ToolAnswer("the episode is over: reply with your final answer")
        try:
            result = await self._tool_call(state, name, args)
        except OrsError as exc:
            self.aggregates.record_tool(name, ok=False)
            # The session is of no more use: end it now (an agent whose rollout fails here
            # never verifies it).
            state.data["finished"] = True
            self._release(session_id)
            raise self._failed(exc) from None
        if not result.ok:
            kind = _MISTAKES.get(result.reason or "")
            if result.reason == "episode_finished":
                return ToolAnswer("the episode is over: reply with your final answer")
            if kind is None:
                self.aggregates.record_tool(name, ok=False)
                raise self._failed(OrsError(name, f"refused the call: {result.text[:200]}"))
            self.aggregates.record_mistake()
            return ToolAnswer(f"error: {result.text}", kind)
        self.aggregates.record_tool(name, ok=True)
        if result.finished:
            self._release(session_id)
        return ToolAnswer(result.text + ("\n(the episode is over)" if result.finished else ""))

    async def _tool_call(self, state: SessionState, name: str, args: dict[str, Any]) -> CallResult:
        """One ``/call``, its reward and finished flag kept in the session's state."""
        wire: OrsSession = state.data["wire"]
        result = await wire.call(name, args)
        if result.ok:
            state.data["calls"] += 1
            if result.reward is not None:
                state.data["rewards"].append(result.reward)
            if result.finished:
                state.data["finished"] = True
        return result

    # --- verification -----------------------------------------------------------------------------

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        """The rewards the calls carried (none: 0.0), after the ``@terminal`` tool (if the
        environment has one) took the final answer; the session is closed after."""
        wire: OrsSession = state.data["wire"]
        self._wires.pop(state.data["session_id"], None)
        try:
            terminal = wire.terminal
            if terminal is not None and not state.data["finished"]:
                arg = terminal.get("arg")
                name = str(terminal["name"])
                result = await self._tool_call(
                    state, name, {arg: answer or ""} if isinstance(arg, str) else {}
                )
                if not result.ok and result.reason != "episode_finished":
                    raise OrsError(name, f"refused the final answer: {result.text[:200]}")
        except OrsError as exc:
            raise self._failed(exc) from None
        finally:
            await asyncio.shield(self._close(wire))
        rewards: list[float] = state.data["rewards"]
        if self.ors_options.reward == "sum":
            reward = sum(rewards)
        else:
            reward = rewards[-1] if rewards else 0.0
        details = {
            "finished": state.data["finished"],
            "tool_calls": state.data["calls"],
            "rewards": rewards,
        }
        return Verdict(reward=reward, details=details)

    def _failed(self, exc: OrsError) -> HTTPError:
        return HTTPError(exc.status, f"environment {self.context.name!r} ({self.where}): {exc}")


def _task_of(task: dict[str, Any], split: str) -> dict[str, Any]:
    """What ``/create`` is sent for a row: its ``task_spec``, or its ``split`` and ``index``.
    A row that fits neither is refused (ValueError: the task's fault)."""
    if "task_spec" in task:
        spec = task["task_spec"]
        if not isinstance(spec, dict):
            raise ValueError("'task_spec' must be an object (the environment's task)")
        return {"task_spec": spec}
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"give 'index' (a non-negative integer) or 'task_spec', got {task!r:.80}")
    chosen = task.get("split", split)
    if not isinstance(chosen, str):
        raise ValueError(f"'split' must be a string, got {chosen!r:.40}")
    return {"split": chosen, "index": index}


def _function(entry: dict[str, Any]) -> dict[str, Any]:
    """An ORS tool (``ToolSpec``) as an OpenAI function: its input schema as the parameters."""
    schema = entry.get("input_schema")
    parameters = schema if isinstance(schema, dict) and schema else _EMPTY_SCHEMA
    return {
        "type": "function",
        "function": {
            "name": entry["name"],
            "description": str(entry.get("description") or ""),
            "parameters": parameters,
        },
    }
