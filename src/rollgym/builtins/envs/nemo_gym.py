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
  expires unused, and at shutdown, one still being seeded then included (its close waits for
  the ``/seed_session`` that gives it its cookie).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import orjson
from pydantic import Field

from rollgym.builtins.envs.foreign import (
    ForeignOptions,
    ForeignSessionsEnvironment,
    server_url,
)
from rollgym.builtins.envs.nemo_gym_host import ResourcesProcess, log_path_for
from rollgym.builtins.envs.nemo_gym_wire import NemoGymError, ResourcesSession
from rollgym.servers import (
    INVALID_ARGUMENTS,
    HTTPError,
    ServerOptions,
    SessionState,
    SetupProblem,
    ToolAnswer,
    Verdict,
    responses_api,
)

PARAMS = "responses_create_params"
#: Verify answer fields that are the request echoed back, not the verdict.
_ECHOED = frozenset((PARAMS, "response", "reward"))
#: The routes every resource server has (SimpleResourcesServer.setup_webserver).
_PROTOCOL_ROUTES = ("/seed_session", "/verify")


class NemoGymOptions(ForeignOptions):
    """Where the resource server is, or how rollgym starts it."""

    place_options: ClassVar[tuple[str, str]] = ("resources_url", "resources_server")

    resources_url: str | None = server_url("a NeMo Gym resource server")
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


class NemoGymEnv(ForeignSessionsEnvironment[ResourcesSession]):
    """A NeMo Gym resource server's sessions as rollgym sessions (see the module docstring)."""

    Options: ClassVar[type[ServerOptions]] = NemoGymOptions
    options: NemoGymOptions
    url_what = "NeMo Gym resource server"
    local_what = "NeMo Gym resource server"
    closes_metric = "resources_sessions"

    # --- start-up -------------------------------------------------------------------------------

    def start_local(self, target: str) -> ResourcesProcess:
        options = self.options
        process = ResourcesProcess(
            self.context.name,
            target,
            options.python,
            options.server_config,
            log_path_for(self.context.name),
        )
        process.wait_ready(options.start_timeout_s)
        return process

    def check_protocol(self) -> None:
        """The server's routes (FastAPI's ``/openapi.json``), read once at start-up: a server
        without ``/seed_session`` and ``/verify`` is not a resource server, said before the
        first rollout."""
        # FastAPI builds the schema on the first ask: seconds for NeMo Gym's large bodies.
        body = self.setup_json("/openapi.json", self.options.start_timeout_s)
        paths = body.get("paths") if isinstance(body, dict) else None
        missing = [p for p in _PROTOCOL_ROUTES if not isinstance(paths, dict) or p not in paths]
        if missing:
            raise SetupProblem(
                self.key,
                f"{self.where}: not a NeMo Gym resource server: it has no "
                f"{' and no '.join(missing)} route",
            )

    # --- sessions ---------------------------------------------------------------------------------

    async def seed(self, task: dict[str, Any]) -> SessionState:
        chat = _chat_of(task)
        wire = ResourcesSession(self.http(), self.base_url, self.options.answer_timeout_s)
        async with self.seeding(wire) as creation:
            await creation.of(wire.seed(task))
        tools = chat.get("tools")
        tools = tools if isinstance(tools, list) else []
        messages = chat["messages"]
        assert isinstance(messages, list)  # to_chat_request builds a list
        return self.seeded(wire, messages, tools, task=task, output=[])

    async def close_wire(self, wire: ResourcesSession, session_id: str) -> bool | None:
        """``/close_session``, counted as closed or refused (``aggregate_metrics``)."""
        return await wire.close(session_id)

    # --- tools ------------------------------------------------------------------------------------

    async def foreign_step(
        self, state: SessionState, name: str, args: dict[str, Any], call_id: str | None
    ) -> ToolAnswer:
        """``POST /<tool>`` with the session's cookie; the call and its output are kept for
        ``/verify`` (as a Responses API answer's items)."""
        wire: ResourcesSession = state.data["wire"]
        answer = await wire.call(name, args)
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
        task: dict[str, Any] = state.data["task"]
        async with self.verifying(state) as wire:
            verdict = await wire.verify({**task, "response": self._response(state, answer)})
            reward = verdict["reward"]
            if isinstance(reward, bool) or not isinstance(reward, int | float):
                raise NemoGymError(
                    "verify", f"answered off-protocol: a non-numeric reward {reward!r}"
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
