"""The NeMo Gym row agent: runs a NeMo Gym dataset row as it is.

A NeMo Gym row holds the model request in ``responses_create_params`` (an OpenAI Responses API
body: ``input``, ``tools``, ``temperature``, ``max_output_tokens`` ...), the agent it belongs to
in ``agent_ref: {type, name}``, and whatever its verifier needs (``expected_answer`` ...). This
agent seeds a session of the environment that ``agent_ref.name`` maps to (``environments``,
else ``environment``) with the rest of the row, plays the request's conversation with tool
calls against the model, and verifies the final answer there.

The Responses body is validated and translated by :mod:`rollgym.servers.responses_api` (the
code behind the model servers' ``/v1/responses``) and sent as chat completions, so the engine's
token ids and log-probabilities come back for the trajectory, as NeMo Gym's own vLLM model
server does. A row whose ``input`` is empty (``"input": []``: an environment-driven task, whose
prompt the environment's seed supplies) starts from the seeded session's messages, after the
request's ``instructions`` if it has any; it is refused only when the seed gives no prompt
either. What rollgym cannot serve is refused as ``invalid_row`` naming the field: image,
file or audio inputs, reasoning items, ``previous_response_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from rollgym.servers import (
    Agent,
    AgentOptions,
    HTTPError,
    RolloutContext,
    ServerCallError,
    ServerKind,
    ServerOptions,
    play_and_verify,
    responses_api,
    task_of,
)

PARAMS = "responses_create_params"
AGENT_REF = "agent_ref"
_ROW_PREFIX = f"row.{PARAMS}"
#: Content part types that carry something other than text.
_MEDIA_PARTS = frozenset(("input_image", "input_file", "input_audio", "image_url"))
#: Set on a chat request whose prompt is to come from the environment's seed.
PROMPT_FROM_SEED = "prompt_from_seed"


class NemoGymRowOptions(AgentOptions):
    server_refs: ClassVar[dict[str, ServerKind]] = {
        **AgentOptions.server_refs,
        "environments": "environment",
    }

    model: str
    environment: str | None = None
    environments: dict[str, str] = Field(
        default_factory=dict,
        description="agent_ref.name -> environment server that verifies that row's rollouts.",
    )
    max_turns: int = Field(16, ge=1, description="Most model calls per rollout.")


def _refuse(message: str, field: str) -> ServerCallError:
    return ServerCallError(f"row field {field!r}: {message}", field=field, bad_input=True)


def _unsupported(params: Mapping[str, object]) -> ServerCallError | None:
    """Images and reasoning items get their own message (the generic one only lists types)."""
    items = params.get("input")
    if not isinstance(items, list):
        return None
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        where = f"{_ROW_PREFIX}.input.{index}"
        if item.get("type") == "reasoning":
            return _refuse("reasoning items are not supported", f"{where}.type")
        content = item.get("content")
        for part_index, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") in _MEDIA_PARTS:
                return _refuse(
                    f"{part.get('type')} inputs are not supported (text only)",
                    f"{where}.content.{part_index}.type",
                )
    return None


def chat_request_of(row: Mapping[str, object]) -> dict[str, Any]:
    """The chat completion request the row's ``responses_create_params`` asks for."""
    params = row.get(PARAMS)
    if not isinstance(params, dict):
        raise _refuse("must be an object (an OpenAI Responses API request)", f"row.{PARAMS}")
    problem = _unsupported(params)
    if problem is not None:
        raise problem
    from_seed = params.get("input") == []
    if from_seed:  # the environment's seed supplies the prompt: parse the rest of the request
        params = {**params, "input": ""}
    try:
        request = responses_api.parse_request(params)
    except HTTPError as exc:
        field = _ROW_PREFIX + (exc.field or "body").removeprefix("body")
        raise _refuse(exc.message.split(": ", 1)[-1], field) from None
    chat = responses_api.to_chat_request(request)
    if from_seed:
        messages = chat["messages"]
        if isinstance(messages, list):  # always: to_chat_request builds a list
            chat["messages"] = messages[:-1]  # the placeholder user message
        chat[PROMPT_FROM_SEED] = True
    return chat


def _conversation_keys(chat: Mapping[str, object]) -> dict[str, object]:
    return {
        k: v for k, v in chat.items() if k not in ("model", "messages", "tools", PROMPT_FROM_SEED)
    }


class NemoGymRowAgent(Agent):
    """Play a NeMo Gym row's ``responses_create_params``; verify in its environment."""

    Options: ClassVar[type[ServerOptions]] = NemoGymRowOptions
    options: NemoGymRowOptions

    def environment_for(self, row: Mapping[str, object]) -> str | None:
        ref = row.get(AGENT_REF)
        name = ref.get("name") if isinstance(ref, dict) else None
        routes = self.options.environments
        if isinstance(name, str) and name in routes:
            return routes[name]
        if self.options.environment is None:
            raise _refuse(
                f"names {name!r}, which no entry of 'environments' maps to "
                f"(known: {sorted(routes)}) and this agent has no default 'environment'",
                f"row.{AGENT_REF}.name",
            )
        return self.options.environment

    def row_sampling(self, row: Mapping[str, object]) -> object:
        """The request's own parameters (temperature, max_output_tokens ...), then the row's
        ``sampling`` over them."""
        own = row.get("sampling")
        merged = _conversation_keys(chat_request_of(row))
        if own is None:
            return merged
        # anything else that is not an object goes on as it is, to be refused naming the row
        return {**merged, **own} if isinstance(own, dict) else own

    async def run(self, row: Mapping[str, object], rollout: RolloutContext) -> dict[str, Any]:
        chat = chat_request_of(row)
        task = {k: v for k, v in task_of(row).items() if k not in (PARAMS, AGENT_REF)}
        seeded = await rollout.env.seed(task)
        tools = chat.get("tools") or seeded.get("tools") or None
        messages = chat["messages"]
        if chat.get(PROMPT_FROM_SEED):
            prompt = seeded.get("messages")
            if not isinstance(prompt, list) or not prompt:
                raise _refuse(
                    "is empty and the environment's seed_session gave no messages to start from",
                    f"{_ROW_PREFIX}.input",
                )
            messages = [*messages, *prompt]
        return await play_and_verify(rollout, messages, tools, self.options.max_turns)
