"""The multi-turn tool-calling loop: one rollout, played turn by turn against model and env.

Shared by the ``tool_loop`` agent (environment over HTTP) and an environment's episode
``/run`` (its own sessions in-process), so both play an episode the same way. Tool mistakes
the model makes (arguments that are not JSON, JSON that is not an object, arguments that do not
fit the tool's schema, an unknown tool) are told to the model as the tool's output, as a real
tool runtime would: each tool call goes to the environment as the model wrote it
(``EnvSession.call_model_tool``), which judges it, so the mistake is part of the rollout (its
conversation, trajectory and tool span), not a failure of it. Only a fault of rollgym, the model
server or the environment ends a rollout early.
"""

from __future__ import annotations

from typing import Any

from rollgym.errors import ServerCallError
from rollgym.servers.rollout_context import RolloutContext


async def play_tool_loop(
    rollout: RolloutContext, task: dict[str, Any], *, max_turns: int
) -> dict[str, Any]:
    """Seed, alternate model turns and tool calls until a plain answer or ``max_turns``, verify.

    Answers ``{"reward", "details", "answer", "turns", "tool_calls"}``.
    """
    seeded = await rollout.env.seed(task)
    messages = list(seeded.get("messages") or [])
    return await play_and_verify(rollout, messages, seeded.get("tools") or None, max_turns)


async def play_and_verify(
    rollout: RolloutContext,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    max_turns: int,
) -> dict[str, Any]:
    """The turns from ``messages`` (the environment already seeded), then verify the answer."""
    messages = list(messages)
    answer: str | None = None
    turns = tool_calls = 0
    while turns < max_turns:
        completion = await rollout.chat(messages, tools)
        turns += 1
        message = first_message(completion)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ServerCallError("the model answered 'tool_calls' that is not a list")
        if not calls:
            answer = message.get("content")
            break
        for call in calls:
            tool_calls += 1
            messages.append(await _run_call(rollout, call))
    verdict = await rollout.env.verify(answer)
    return {
        "reward": verdict.get("reward"),
        "details": verdict.get("details", {}),
        "answer": answer,
        "turns": turns,
        "tool_calls": tool_calls,
    }


def first_message(completion: dict[str, Any]) -> dict[str, Any]:
    try:
        message = completion["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise ServerCallError(
            "the model answered a completion without choices[0].message"
        ) from None
    if not isinstance(message, dict):
        raise ServerCallError("the model answered a choices[0].message that is not an object")
    return message


async def _run_call(rollout: RolloutContext, call: object) -> dict[str, object]:
    """One tool call of the model's answered as the tool message the model reads next."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        # the model server's answer is malformed (an engine always gives this shape)
        raise ServerCallError("the model answered a tool call without a 'function' object")
    name = function.get("name")
    call_id = call.get("id")
    answer = await rollout.env.call_model_tool(
        name if isinstance(name, str) else "",
        function.get("arguments"),
        call_id if isinstance(call_id, str) else None,
    )
    return {"role": "tool", "tool_call_id": call.get("id", ""), "content": answer.output}
