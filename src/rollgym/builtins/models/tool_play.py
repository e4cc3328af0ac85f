"""How the simulated model plays an environment it does not know: call its tools, then answer.

When a request offers tools that none of the built-in games (arithmetic, keychain, code,
terminal) knows, the policy calls each offered tool once, in the order offered, one call a
turn, with arguments valid for the tool's schema (:mod:`schema_args`, seeded by the request),
and once every tool has answered it replies ``Answer: <the last tool's output>``. A wrong
rollout (the ``accuracy`` knob) answers without looking. That is enough to smoke-test a new
environment end to end (seed, every tool, verify) with ``rollgym run`` and no real model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rollgym.builtins.models.reply import Reply
from rollgym.builtins.models.schema_args import arguments_for, quoted_words

#: Tool calls of one episode at most, whatever the number of tools offered.
MAX_CALLS = 8


def turn(
    messages: list[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    correct: bool,
    rng: random.Random,
    text_of: Callable[[dict[str, Any]], str],
) -> Reply:
    """The next message of an episode whose tools are ``tools`` (OpenAI tool objects)."""
    functions = [t.get("function") or {} for t in tools if isinstance(t, dict)]
    functions = [f for f in functions if isinstance(f.get("name"), str)]
    start = _last_user(messages)
    called = [
        call.get("function", {}).get("name")
        for message in messages[start + 1 :]
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    pending = [f for f in functions if f["name"] not in called]
    if pending and len(called) < MAX_CALLS:
        function = pending[0]
        hints = quoted_words(text_of(messages[start])) if start >= 0 else []
        return Reply(
            tool_call=(function["name"], arguments_for(function.get("parameters"), rng, hints))
        )
    last = messages[-1] if messages else {}
    if not correct or last.get("role") != "tool":
        return Reply(content="Answer: I do not know")
    return Reply(content=f"Answer: {text_of(last).strip()}")


def _last_user(messages: Sequence[Mapping[str, object]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return -1
