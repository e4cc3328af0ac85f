"""``impl: nemo_gym``: a NeMo Gym resource server, played as a rollgym environment.

The resource server runs unchanged: one the user runs (``resources_url:``, e.g. started by
NeMo Gym's ``ng_run``), or one rollgym starts itself in the interpreter that has nemo-gym
(``resources_server:`` a module or an ``app.py``, :mod:`rollgym.builtins.envs.nemo_gym_host`).
Each rollgym session is one resource-server session (its cookie,
:mod:`rollgym.builtins.envs.nemo_gym_wire`), played as NeMo Gym's own ``simple_agent`` plays
it, so the built-in ``tool_loop`` agent, the environment's own episode ``/run`` and the
simulated model play it like any environment:

- the task is a NeMo Gym dataset row: its ``responses_create_params`` (an OpenAI Responses API
  request) gives the prompt (``input``, ``instructions``) and the tools (``tools``); the rest
  (``expected_answer``, ...) is the verifier's;
- seeding a session posts the row to ``/seed_session`` and keeps the session cookie;
- each tool call posts its arguments to ``/<tool name>`` with the cookie; whatever the server
  answers is the tool's output (NeMo Gym's agents do the same), a 422 being the model's mistake;
- verifying posts the row plus ``response``, the episode as a Responses API answer (each tool
  call and its output, then the final answer as a message), to ``/verify``; its ``reward`` is
  the rollout's, its other fields the verdict's details;
- the session is closed with ``/close_session`` when the rollout is verified, when its
  episode ``/run`` ends however it ends, when a tool call fails, when the rollgym session
  expires unused, and at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

import aiohttp
import orjson
from pydantic import Field, model_validator

from rollgym.builtins.envs.foreign import check_one_place, fetch_setup_json
from rollgym.builtins.envs.nemo_gym_host import ResourcesProcess, StartFailed, log_path_for
from rollgym.builtins.envs.nemo_gym_wire import NemoGymError, ResourcesSession
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
    responses_api,
    unknown_session,
)

PARAMS = "responses_create_params"
#: Verify answer fields that are the request echoed back, not the verdict.
_ECHOED = frozenset((PARAMS, "response", "reward"))
#: The routes every resource server has (SimpleResourcesServer.setup_webserver).
_PROTOCOL_ROUTES = ("/seed_session", "/verify")


class NemoGymOptions(EnvironmentOptions):
    """Where the resource server is, or how rollgym starts it."""

    resources_url: str | None = Field(
        None, description="Base URL of a NeMo Gym resource server you run (http://host:port)."
    )
    resources_server: str | None = Field(
        None,
        description="The resource server rollgym starts: its app.py (a path) or module "
        "(resources_servers.example_single_tool_call.app), run by 'python'.",
    )
    python: str = Field(
        "python3", description="The interpreter that has nemo-gym (for resources_server)."
    )
    server_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The resource server's own config keys (for resources_server).",
    )
    start_timeout_s: float = Field(
        120.0, gt=0, description="Time for a started resource server to answer."
    )
    answer_timeout_s: float = Field(
        60.0, gt=0, description="Time for one seed, tool call or verify to answer."
    )

    @model_validator(mode="after")
    def _one_place(self) -> NemoGymOptions:
        check_one_place(
            self.resources_url, "resources_url", self.resources_server, "resources_server"
        )
        return self


class NemoGymEnv(Environment):
    """A NeMo Gym resource server's sessions as rollgym sessions (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = NemoGymOptions

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        options = self.nemo_gym_options
        self._process: ResourcesProcess | None = None
        if options.resources_server is not None:
            target = options.resources_server
            self._key = "resources_server"
            self.where = f"NeMo Gym resource server {target!r}"
            self._process = self._start(target)
            self._base_url = self._process.url
        else:
            assert options.resources_url is not None
            self._key = "resources_url"
            self._base_url = options.resources_url.rstrip("/")
            self.where = f"NeMo Gym resource server {self._base_url}"
        try:
            self._check_protocol()
        except SetupProblem:
            self._stop_process()
            raise
        self._http: aiohttp.ClientSession | None = None
        #: The resource-server session of each live rollgym session: what must be closed.
        self._wires: dict[str, ResourcesSession] = {}
        self._closing: set[asyncio.Task[bool]] = set()
        #: Sessions closed, and closes the server refused (``aggregate_metrics``).
        self.closes = {"closed": 0, "refused": 0}

    @property
    def nemo_gym_options(self) -> NemoGymOptions:
        assert isinstance(self.options, NemoGymOptions)
        return self.options

    # --- start-up and shutdown ------------------------------------------------------------------

    def _start(self, target: str) -> ResourcesProcess:
        options = self.nemo_gym_options
        try:
            process = ResourcesProcess(
                self.context.name,
                target,
                options.python,
                options.server_config,
                log_path_for(self.context.name),
            )
            process.wait_ready(options.start_timeout_s)
        except StartFailed as exc:
            raise SetupProblem(self._key, f"{self.where}: {exc}") from None
        return process

    def _check_protocol(self) -> None:
        """The server's routes (FastAPI's ``/openapi.json``), read once at start-up: a server
        without ``/seed_session`` and ``/verify`` is not a resource server, said before the
        first rollout."""
        # FastAPI builds the schema on the first ask: seconds for NeMo Gym's large bodies.
        body = fetch_setup_json(
            self._base_url,
            "/openapi.json",
            self.nemo_gym_options.start_timeout_s,
            self.where,
            self._key,
        )
        paths = body.get("paths") if isinstance(body, dict) else None
        missing = [p for p in _PROTOCOL_ROUTES if not isinstance(paths, dict) or p not in paths]
        if missing:
            raise SetupProblem(
                self._key,
                f"{self.where}: not a NeMo Gym resource server: it has no "
                f"{' and no '.join(missing)} route",
            )

    def _stop_process(self) -> None:
        if self._process is not None:
            self._process.stop()

    async def on_startup(self) -> None:
        await super().on_startup()
        # One session's requests are sequential; rollouts in flight each need a connection.
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
        )

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
            for session_id in list(self._wires):
                self._release(session_id)
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
        finally:
            await asyncio.to_thread(self._stop_process)

    def aggregate_metrics(self) -> dict[str, object]:
        return {**super().aggregate_metrics(), "resources_sessions": dict(self.closes)}

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
        chat = _chat_of(task)
        if self._http is None:
            raise HTTPError(503, f"environment {self.context.name!r} is not started")
        wire = ResourcesSession(self._http, self._base_url, self.nemo_gym_options.answer_timeout_s)
        try:
            await wire.seed(task)
        except NemoGymError as exc:
            raise self._failed(exc) from None
        except BaseException:
            await asyncio.shield(self._close(wire, ""))
            raise
        tools = chat.get("tools")
        tools = tools if isinstance(tools, list) else []
        data: dict[str, Any] = {
            "wire": wire,
            "task": task,
            "tools": tools,
            "tool_names": frozenset(str(t["function"]["name"]) for t in tools),
            "output": [],
        }
        messages = chat["messages"]
        assert isinstance(messages, list)  # to_chat_request builds a list
        return SessionState(messages=messages, data=data)

    def on_session_expired(self, state: SessionState) -> None:
        self._release(state.data["session_id"])

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """The shared tool loop; the resource session closed however the episode ends."""
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
        if wire is None or wire.closed:
            return
        task = asyncio.get_running_loop().create_task(self._close(wire, session_id))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, wire: ResourcesSession, session_id: str) -> bool:
        if wire.closed:
            return True
        taken = await wire.close(session_id)
        self.closes["closed" if taken else "refused"] += 1
        return taken

    # --- tools ------------------------------------------------------------------------------------

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        answer = await self.call_model_tool(session_id, name, arguments)
        if answer.error == UNKNOWN_TOOL:
            raise HTTPError(404, answer.output.removeprefix("error: "), field="tool")
        if answer.error is not None:
            raise HTTPError(400, answer.output.removeprefix("error: "), field="arguments")
        return answer.output

    async def call_model_tool(
        self, session_id: str, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        session = self.sessions.get(session_id)
        if session is None:
            raise unknown_session(session_id)
        if gate.env:
            from rollgym.servers import spans

            with spans.env_tool_span(session.rollout_id, name[:128], call_id) as span:
                answer = await self._call(session_id, session.state, name, arguments, call_id)
                if answer.error is not None:
                    spans.record_tool_model_error(span, answer.error)
                return answer
        return await self._call(session_id, session.state, name, arguments, call_id)

    async def _call(
        self,
        session_id: str,
        state: SessionState,
        name: str,
        arguments: object,
        call_id: str | None,
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
        wire: ResourcesSession = state.data["wire"]
        try:
            answer = await wire.call(name, args)
        except NemoGymError as exc:
            self.aggregates.record_tool(name, ok=False)
            # The session is of no more use: end it now (an agent whose rollout fails here
            # never verifies it).
            self._release(session_id)
            raise self._failed(exc) from None
        output: list[dict[str, Any]] = state.data["output"]
        call = call_id or f"call_{len(output) // 2}"
        output.append(
            {
                "type": "function_call",
                "call_id": call,
                "name": name,
                "arguments": orjson.dumps(args).decode(),
                "id": f"fc_{call}",
                "status": "completed",
            }
        )
        output.append({"type": "function_call_output", "call_id": call, "output": answer.text})
        if answer.status == 422:  # FastAPI: the arguments do not fit the tool's body
            self.aggregates.record_mistake()
            return ToolAnswer(answer.text, INVALID_ARGUMENTS)
        self.aggregates.record_tool(name, ok=answer.ok)
        return ToolAnswer(answer.text)

    # --- verification -----------------------------------------------------------------------------

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        """``/verify`` with the episode as NeMo Gym's response; the session closed after."""
        wire: ResourcesSession = state.data["wire"]
        session_id: str = state.data["session_id"]
        self._wires.pop(session_id, None)
        task: dict[str, Any] = state.data["task"]
        try:
            verdict = await wire.verify({**task, "response": self._response(state, answer)})
        except NemoGymError as exc:
            raise self._failed(exc) from None
        finally:
            await asyncio.shield(self._close(wire, session_id))
        reward = verdict["reward"]
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise self._failed(
                NemoGymError("verify", f"answered off-protocol: a non-numeric reward {reward!r}")
            )
        details = {k: v for k, v in verdict.items() if k not in _ECHOED and k not in task}
        details["tool_calls"] = len(state.data["output"]) // 2
        return Verdict(reward=float(reward), details=details)

    def _response(self, state: SessionState, answer: str | None) -> dict[str, Any]:
        """The episode as an OpenAI Responses API answer, what NeMo Gym's verifiers read."""
        output = list(state.data["output"])
        session_id = state.data["session_id"]
        if answer is not None:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{session_id}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer, "annotations": []}],
                }
            )
        params = state.data["task"].get(PARAMS)
        tools = params.get("tools") if isinstance(params, dict) else None
        return {
            "id": f"resp_{session_id}",
            "created_at": int(time.time()),
            "model": "rollgym",
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": tools if isinstance(tools, list) else [],
        }

    def _failed(self, exc: NemoGymError) -> HTTPError:
        return HTTPError(exc.status, f"environment {self.context.name!r} ({self.where}): {exc}")


def _chat_of(task: dict[str, Any]) -> dict[str, object]:
    """The prompt and tools of the row's Responses API request, as chat (ValueError: the
    task's fault, told as a rejected task)."""
    params = task.get(PARAMS)
    if not isinstance(params, dict):
        raise ValueError(f"'{PARAMS}' must be an object (an OpenAI Responses API request)")
    try:
        return responses_api.to_chat_request(responses_api.parse_request(params))
    except HTTPError as exc:
        raise ValueError(f"'{PARAMS}': {exc.message.removeprefix('body.')}") from None
