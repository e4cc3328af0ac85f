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

The ORS session is owned (:class:`~rollgym.builtins.envs.foreign.ForeignSessionsEnvironment`):
closed at verification, when the episode ``/run`` ends however it ends, when a tool call
fails, when the rollgym session expires unused, and at shutdown, one still being created then
included (its ``/delete`` waits for the ``/create`` it undoes).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from rollgym.builtins.envs.foreign import (
    EPISODE_OVER,
    OVER_NOTE,
    EpisodeReward,
    ForeignOptions,
    ForeignSessionsEnvironment,
    SystemPrompt,
    episode_reward,
    function_tool,
    server_url,
)
from rollgym.builtins.envs.ors_host import OrsProcess, default_python
from rollgym.builtins.envs.ors_wire import CallResult, OrsError, OrsSession
from rollgym.servers import (
    INVALID_ARGUMENTS,
    UNKNOWN_TOOL,
    ServerOptions,
    SessionState,
    SetupProblem,
    ToolAnswer,
    Verdict,
)

SYSTEM_PROMPT = (
    "You solve the task with the tools offered. Each tool's answer is the environment's. When "
    "the environment says the episode is over, reply with your final answer."
)
#: How ``/call`` refusals map onto the model's mistakes (openreward's RunToolError reasons).
_MISTAKES = {"not_found": UNKNOWN_TOOL, "input_validation": INVALID_ARGUMENTS}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class OrsOptions(ForeignOptions):
    """Where the ORS environment is, and which of its tasks and rewards a rollout plays."""

    place_options: ClassVar[tuple[str, str]] = ("ors_url", "ors_environment")

    ors_url: str | None = server_url("an ORS (openreward) environment server")
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
    reward: EpisodeReward = "last"
    system_prompt: SystemPrompt = SYSTEM_PROMPT
    start_timeout_s: float = Field(
        60.0, gt=0, description="Time for a served environment to answer."
    )


class OrsEnv(ForeignSessionsEnvironment[OrsSession]):
    """An ORS environment's sessions as rollgym sessions (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = OrsOptions
    options: OrsOptions
    url_what = "ORS server"
    local_what = "ORS environment"
    closes_metric = "ors_sessions"
    #: The server's environment the sessions play (``env_name``, else the first it lists).
    _env_name: str

    # --- start-up -------------------------------------------------------------------------------

    def start_local(self, target: str) -> OrsProcess:
        process = OrsProcess(self.context.name, target, self.options.python)
        process.wait_ready(self.options.start_timeout_s)
        return process

    def check_protocol(self) -> None:
        """The server's environments (``/list_environments``), read once at start-up: a
        server that does not answer it is not an ORS server, said before the first rollout."""
        listed = self.setup_json("/list_environments", self.options.start_timeout_s)
        if (
            not isinstance(listed, list)
            or not listed
            or not all(isinstance(n, str) for n in listed)
        ):
            raise SetupProblem(
                self.key,
                f"{self.where}: not an ORS server: GET /list_environments answered "
                f"{str(listed)[:120]!r}, not a list of environment names",
            )
        wanted = self.options.env_name
        if wanted is None:
            self._env_name = str(listed[0])
        elif wanted.lower() in listed:
            self._env_name = wanted.lower()
        else:
            raise SetupProblem("env_name", f"{self.where} has no environment {wanted!r}: {listed}")

    # --- sessions ---------------------------------------------------------------------------------

    async def seed(self, task: dict[str, Any]) -> SessionState:
        chosen = _task_of(task, self.options.split)
        wire = OrsSession(self.http(), self.base_url, self._env_name, self.options.answer_timeout_s)
        async with self.seeding(wire) as creation:
            try:
                await creation.of(wire.open(chosen))
            except OrsError as exc:
                if exc.step == "create" and exc.answered in (400, 422):
                    raise ValueError(f"the ORS server refused it: {exc}") from None
                raise
            await wire.read_tools()
            prompt = await wire.prompt()
        tools = [_function(entry) for entry in wire.tools]
        messages = [
            {"role": "system", "content": self.options.system_prompt},
            {"role": "user", "content": prompt},
        ]
        return self.seeded(wire, messages, tools, rewards=[], calls=0, over=False)

    async def close_wire(self, wire: OrsSession, session_id: str) -> bool | None:
        """``/delete`` and ``/delete_session``, counted as closed or refused."""
        return await wire.close()

    # --- tools ------------------------------------------------------------------------------------

    async def foreign_step(
        self, state: SessionState, name: str, args: dict[str, Any], call_id: str | None
    ) -> ToolAnswer:
        """One ``/call``: the tool's blocks, or the server's refusal told to the model."""
        result = await self._tool_call(state, name, args)
        if not result.ok:
            kind = _MISTAKES.get(result.reason or "")
            if result.reason == "episode_finished":
                return ToolAnswer(EPISODE_OVER)
            if kind is None:
                raise OrsError(name, f"refused the call: {result.text[:200]}")
            self.aggregates.record_mistake()
            return ToolAnswer(f"error: {result.text}", kind)
        self.aggregates.record_tool(name, ok=True)
        if result.finished:
            self.end_episode(state)
        return ToolAnswer(result.text + (OVER_NOTE if result.finished else ""))

    async def _tool_call(self, state: SessionState, name: str, args: dict[str, Any]) -> CallResult:
        """One ``/call``, its reward and finished flag kept in the session's state."""
        wire: OrsSession = state.data["wire"]
        result = await wire.call(name, args)
        if result.ok:
            state.data["calls"] += 1
            if result.reward is not None:
                state.data["rewards"].append(result.reward)
            if result.finished:
                state.data["over"] = True
        return result

    # --- verification -----------------------------------------------------------------------------

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        """The rewards the calls carried (none: 0.0), after the ``@terminal`` tool (if the
        environment has one) took the final answer; the session is closed after."""
        async with self.verifying(state) as wire:
            terminal = wire.terminal
            if terminal is not None and not state.data["over"]:
                arg = terminal.get("arg")
                name = str(terminal["name"])
                result = await self._tool_call(
                    state, name, {arg: answer or ""} if isinstance(arg, str) else {}
                )
                if not result.ok and result.reason != "episode_finished":
                    raise OrsError(name, f"refused the final answer: {result.text[:200]}")
        rewards: list[float] = state.data["rewards"]
        details = {
            "finished": state.data["over"],
            "tool_calls": state.data["calls"],
            "rewards": rewards,
        }
        return Verdict(reward=episode_reward(rewards, self.options.reward), details=details)


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
    return function_tool(entry["name"], str(entry.get("description") or ""), parameters)
