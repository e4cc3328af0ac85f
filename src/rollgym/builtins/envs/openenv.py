"""``impl: openenv``: an environment written with OpenEnv, played as a rollgym environment.

The OpenEnv environment runs unchanged: on a server the user runs (``openenv_url:``), or served
by this process from the ``module:object`` its ``server/app.py`` builds (``openenv_app:``,
:mod:`rollgym.builtins.envs.openenv_host`). Each rollgym session is one OpenEnv session, one
WebSocket (:mod:`rollgym.builtins.envs.openenv_wire`), mapped so the built-in ``tool_loop``
agent, the environment's own episode ``/run`` and the simulated model play it like any
environment:

- seeding a session opens the WebSocket and sends ``reset`` (``seed`` and ``reset`` from the
  task, ``episode_id`` = the rollout id); the prompt is the task's ``prompt`` plus the first
  observation;
- the tools: an MCP environment's own tools (its ``list_tools``, each call a ``call_tool``
  step); any other environment offers one tool named after its action class, whose arguments
  are the action's fields (from the server's ``/schema``), each call one ``step``;
- each step's observation is the tool's output; its ``reward`` is kept, and once its ``done``
  is true the episode is over (the session is closed, later calls are told so);
- verifying answers the reward the observations carried (the last one, or their sum).

The OpenEnv session is owned: closed at verification, when the episode ``/run`` ends however
it ends, when the rollgym session expires unused, and at shutdown; if the process dies its
connections drop and OpenEnv ends their sessions.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import orjson
from pydantic import Field

from rollgym.builtins.envs.foreign import (
    OVER_NOTE,
    EpisodeReward,
    ForeignOptions,
    ForeignSessionsEnvironment,
    SystemPrompt,
    episode_reward,
    function_tool,
    server_url,
)
from rollgym.builtins.envs.openenv_host import HostedApp, app_of, load_object
from rollgym.builtins.envs.openenv_wire import Observation, OpenEnvError, WireSession, ws_url
from rollgym.servers import (
    INVALID_ARGUMENTS,
    ServerOptions,
    SessionState,
    SetupProblem,
    ToolAnswer,
    Verdict,
)

SYSTEM_PROMPT = (
    "You act in an environment through the tools offered. Each tool call is one step; its "
    "answer is the environment's observation. When the environment says the episode is over, "
    "reply with your final answer."
)
#: The action classes of an MCP environment: its tools are listed and called through steps.
MCP_ACTIONS = frozenset({"CallToolAction", "ListToolsAction"})
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


class OpenEnvOptions(ForeignOptions):
    """Where the OpenEnv environment is, and how its episode maps onto rollgym's."""

    place_options: ClassVar[tuple[str, str]] = ("openenv_url", "openenv_app")

    openenv_url: str | None = server_url("an OpenEnv server")
    openenv_app: str | None = Field(
        None,
        description="'module:object': the OpenEnv app (create_app(...)) or Environment class "
        "to serve here, importable from the working directory.",
    )
    reward: EpisodeReward = "last"
    system_prompt: SystemPrompt = SYSTEM_PROMPT
    max_sessions: int = Field(
        4096, ge=1, description="Sessions an Environment class served here allows at once."
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="Time to open a session.")


class OpenEnvEnv(ForeignSessionsEnvironment[WireSession]):
    """An OpenEnv environment's episodes as rollgym sessions (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = OpenEnvOptions
    options: OpenEnvOptions
    url_what = "OpenEnv server"
    local_what = "OpenEnv app"
    #: The action class's JSON schema (from ``/schema``) and whether it is an MCP one.
    _action_schema: dict[str, Any]
    _mcp: bool

    # --- start-up -------------------------------------------------------------------------------

    def start_local(self, target: str) -> HostedApp:
        """The app served here, in a thread of this process (it lives and dies with it)."""
        app = app_of(target, load_object(target), self.options.max_sessions)
        hosted = HostedApp(target, app)
        hosted.start()
        return hosted

    def check_protocol(self) -> None:
        """The action class's JSON schema (``GET /schema``), read once at start-up: a server
        that does not answer it is not an OpenEnv server, said before the first rollout."""
        body = self.setup_json("/schema", self.options.connect_timeout_s)
        action = body.get("action") if isinstance(body, dict) else None
        if not isinstance(action, dict):
            raise SetupProblem(self.key, f"{self.where}: GET /schema has no 'action' schema")
        self._action_schema = action
        self._mcp = action.get("title") in MCP_ACTIONS

    # --- sessions ---------------------------------------------------------------------------------

    async def seed(self, task: dict[str, Any]) -> SessionState:
        reset = _reset_data(task, self.seeding_rollout_id())
        options = self.options
        wire = WireSession(
            self.http(),
            ws_url(self.base_url),
            connect_timeout_s=options.connect_timeout_s,
            answer_timeout_s=options.answer_timeout_s,
        )
        async with self.seeding(wire) as creation:
            await creation.of(wire.connect())  # the server makes the session for the connection
            first = await wire.reset(reset)
            tools = await self._tools(wire)
        prompt = str(task.get("prompt") or "The environment's first observation:")
        messages = [
            {"role": "system", "content": options.system_prompt},
            {"role": "user", "content": f"{prompt}\n\n{_shown(first.fields)}"},
        ]
        if first.done:
            await self.closing(wire, "")
        rewards = [] if first.reward is None else [first.reward]
        return self.seeded(wire, messages, tools, rewards=rewards, steps=0, over=first.done)

    async def _tools(self, wire: WireSession) -> list[dict[str, Any]]:
        """The tools of this session: the MCP environment's own, else its one action."""
        if not self._mcp:
            return [_action_tool(self._action_schema)]
        listed = await wire.step({"type": "list_tools"}, "list_tools")
        tools = listed.fields.get("tools")
        if not isinstance(tools, list):
            raise OpenEnvError("list_tools", "answered an observation without a 'tools' list")
        return [_mcp_tool(entry) for entry in tools]

    async def close_wire(self, wire: WireSession, session_id: str) -> None:
        await wire.close()

    # --- tools ------------------------------------------------------------------------------------

    async def foreign_step(
        self, state: SessionState, name: str, args: dict[str, Any], call_id: str | None
    ) -> ToolAnswer:
        """One ``call_tool`` step (an MCP environment) or one ``step`` with the action."""
        action = {"type": "call_tool", "tool_name": name, "arguments": args} if self._mcp else args
        wire: WireSession = state.data["wire"]
        try:
            seen = await wire.step(action)
        except OpenEnvError as exc:
            if not exc.model_mistake:
                raise
            self.aggregates.record_mistake()
            return ToolAnswer(f"error: {exc}", INVALID_ARGUMENTS)
        self.aggregates.record_tool(name, ok=True)
        state.data["steps"] += 1
        if seen.reward is not None:
            state.data["rewards"].append(seen.reward)
        if seen.done:
            self.end_episode(state)
        return ToolAnswer(_tool_output(seen, self._mcp))

    # --- verification -----------------------------------------------------------------------------

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        """The reward the observations carried (none: 0.0); the session closed."""
        async with self.verifying(state):
            rewards: list[float] = state.data["rewards"]
            reward = episode_reward(rewards, self.options.reward)
        details = {"done": state.data["over"], "steps": state.data["steps"], "rewards": rewards}
        return Verdict(reward=reward, details=details)


def _reset_data(task: dict[str, Any], rollout_id: str | None) -> dict[str, Any]:
    """What ``reset`` is sent: the task's ``reset`` object, its ``seed``, the rollout id as
    the episode id. A task that does not fit is refused (ValueError: the task's fault)."""
    data: dict[str, Any] = {}
    extra = task.get("reset", {})
    if not isinstance(extra, dict):
        raise ValueError("'reset' must be an object (the keyword arguments of reset())")
    if rollout_id is not None:
        data["episode_id"] = rollout_id
    if "seed" in task:
        seed = task["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"'seed' must be a non-negative integer, got {seed!r}")
        data["seed"] = seed
    data.update(extra)
    return data


def _action_tool(schema: dict[str, Any]) -> dict[str, Any]:
    """The one tool of an environment without MCP tools: its action class, as a function."""
    title = str(schema.get("title") or "step")
    name = _TOOL_NAME.sub("_", title)[:64] or "step"
    parameters = {k: v for k, v in schema.items() if k not in ("title", "description")}
    properties = dict(parameters.get("properties") or {})
    properties.pop("metadata", None)  # every OpenEnv action has it; not the model's business
    parameters["properties"] = properties
    if isinstance(parameters.get("required"), list):
        parameters["required"] = [r for r in parameters["required"] if r != "metadata"]
    description = str(schema.get("description") or f"Take one step: a {title}.")
    return function_tool(name, description, parameters)


def _mcp_tool(entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise OpenEnvError("list_tools", f"answered a tool without a name: {entry!r:.200}")
    parameters = entry.get("input_schema") or entry.get("inputSchema") or {"type": "object"}
    return function_tool(entry["name"], str(entry.get("description") or ""), parameters)


def _tool_output(seen: Observation, mcp: bool) -> str:
    """What the model reads after a step: an MCP tool's result, else the observation."""
    if not mcp:
        shown = _shown(seen.fields)
    else:
        error = seen.fields.get("error")
        if isinstance(error, dict) and error:
            return f"error: {error.get('message') or _shown(error)}"
        shown = _result_text(seen.fields.get("result"))
    return shown + (OVER_NOTE if seen.done else "")


def _result_text(result: object) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            texts = [
                str(c["text"])
                for c in content
                if isinstance(c, dict) and isinstance(c.get("text"), str)
            ]
            if texts:
                return "\n".join(texts)
        if result.get("data") is not None:
            return _result_text(result["data"])
    return _shown(result)


def _shown(value: object) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
