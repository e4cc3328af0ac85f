"""Spans and trajectory turns for the steps a verifiers environment takes inside its rollout.

verifiers owns the rollout loop (``MultiTurnEnv.rollout``), so rollgym sees its steps only
through the methods that loop calls on the environment: ``setup_state`` (the episode's
start), ``call_tool`` (one tool call of a ``ToolEnv``) and ``env_response`` (one environment
turn of any other ``MultiTurnEnv``). :func:`instrument` wraps those on the one environment
instance this server loaded (the class and the package stay untouched), so each becomes the
span rollgym names it (``gym.env.seed_session``, ``gym.env.tool``) with the rollout id, and a
tool call joins the rollout's trajectory as a tool turn. The rollout a call belongs to is
:data:`CURRENT`, set around the rollout: outside one (or with tracing off) a wrapped method
is only the method.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from rollgym.servers import gate, spans

#: What stands in the trajectory for an environment turn of a MultiTurnEnv (no tool of its own).
ENV_RESPONSE = "env_response"
#: The kind a tool call that raised is recorded with (as rollgym.servers.tools names it).
INVALID_ARGUMENTS = "invalid_arguments"


#: A step method of a verifiers environment (all of them are coroutines).
Step = Callable[..., Awaitable[object]]


class ToolTurns(Protocol):
    """What a step writes into the rollout's trajectory (its TrajectoryRecorder has it)."""

    def tool_call(
        self, name: str, arguments: object, output: str, *, error: str | None = None
    ) -> None: ...


@dataclass(frozen=True)
class Playing:
    """The rollout the current task plays: its id for the spans, its trajectory (or None)."""

    rollout_id: str | None
    trajectory: ToolTurns | None


#: The rollout being played in this task (set by the episode, copied into verifiers' tasks).
CURRENT: contextvars.ContextVar[Playing | None] = contextvars.ContextVar(
    "verifiers_rollout", default=None
)


def instrument(env: object, tool_env: type) -> None:
    """Wrap ``env``'s step methods (see the module docstring); ``tool_env``: vf.ToolEnv.
    Each wrapper is set on the instance, so the class (and every other instance) is as it was."""
    steps = [("setup_state", _seeded)]
    steps.append(
        ("call_tool", _tool_called) if isinstance(env, tool_env) else ("env_response", _responded)
    )
    for name, wrap in steps:
        method = getattr(env, name, None)
        if callable(method):
            setattr(env, name, wrap(method))


def _seeded(method: Step) -> Step:
    @functools.wraps(method)
    async def setup_state(state: object, *args: object, **kwargs: object) -> object:
        playing = CURRENT.get()
        if playing is None or not gate.env:
            return await method(state, *args, **kwargs)
        with spans.env_seed_span(playing.rollout_id):
            return await method(state, *args, **kwargs)

    return setup_state


def _tool_called(method: Step) -> Step:
    @functools.wraps(method)
    async def call_tool(
        tool_name: str,
        tool_args: dict[str, object],
        tool_call_id: str,
        *args: object,
        **kwargs: object,
    ) -> object:
        playing = CURRENT.get()
        if playing is None:
            return await method(tool_name, tool_args, tool_call_id, *args, **kwargs)
        try:
            if gate.env:
                with spans.env_tool_span(playing.rollout_id, str(tool_name)[:128], tool_call_id):
                    message = await method(tool_name, tool_args, tool_call_id, *args, **kwargs)
            else:
                message = await method(tool_name, tool_args, tool_call_id, *args, **kwargs)
        except Exception as exc:
            # ToolEnv tells the model (its error_formatter), or stops on it (stop_errors):
            # either way the turn is in the trajectory, marked as a failed call.
            if playing.trajectory is not None:
                playing.trajectory.tool_call(
                    str(tool_name), tool_args, f"error: {exc}", error=INVALID_ARGUMENTS
                )
            raise
        if playing.trajectory is not None:
            playing.trajectory.tool_call(str(tool_name), tool_args, message_text(message))
        return message

    return call_tool


def _responded(method: Step) -> Step:
    @functools.wraps(method)
    async def env_response(
        messages: list[object], state: object, *args: object, **kwargs: object
    ) -> object:
        playing = CURRENT.get()
        if playing is None:
            return await method(messages, state, *args, **kwargs)
        if gate.env:
            with spans.env_tool_span(playing.rollout_id, ENV_RESPONSE):
                answer = await method(messages, state, *args, **kwargs)
        else:
            answer = await method(messages, state, *args, **kwargs)
        if playing.trajectory is not None:
            said = message_text(messages[-1]) if messages else ""
            playing.trajectory.tool_call(ENV_RESPONSE, {"message": said}, messages_text(answer))
        return answer

    return env_response


def message_text(message: object) -> str:
    """The text of one verifiers message (a pydantic message or a dict), parts joined."""
    content = (
        message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    )
    if content is None:
        return "" if message is None or hasattr(message, "content") else str(message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            if isinstance(text, str):
                texts.append(text)
        return "\n".join(texts)
    return str(content)


def messages_text(messages: object) -> str:
    """The text of what an environment turn answered (a list of messages, or a string)."""
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        return "\n".join(message_text(m) for m in messages)
    return message_text(messages)
