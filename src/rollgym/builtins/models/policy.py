"""The simulated policy's rules: what a "correct" and an "incorrect" model would say next.

Kept apart from the HTTP server so the rules read in one page. The policy really solves the
built-in tasks when correct: it computes the arithmetic expression of the prompt, and follows
the keychain one ``read_key`` call per turn using the previous tool output. When incorrect it
gives a plausible wrong answer (an off-by-a-little number, a wrong or early-guessed secret).
The sandboxed environments (code, terminal) are played by :mod:`sandbox_play`, and any other
environment whose tools are offered by :mod:`tool_play` (each tool called with schema-valid
arguments, then an answer).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rollgym.builtins.arith import evaluate, format_number
from rollgym.builtins.models.reply import Reply

_COMPUTE = re.compile(r"compute:\s*(.+)", re.IGNORECASE)
_START_KEY = re.compile(r"start key:\s*([\w-]+)", re.IGNORECASE)
_NEXT_KEY = re.compile(r"next key:\s*([\w-]+)", re.IGNORECASE)
_SECRET = re.compile(r"secret:\s*([\w-]+)", re.IGNORECASE)
_HEX = "0123456789abcdef"


def decide(
    messages: list[dict[str, Any]],
    tool_names: set[str],
    correct: bool,
    rng: random.Random,
    tools: Sequence[dict[str, Any]] = (),
) -> Reply:
    """The next assistant message for this conversation; ``tools`` are the offered tools
    (OpenAI tool objects, their ``tool_names`` allowed), for environments of no built-in game."""
    if "run_public_tests" in tool_names or "run_shell" in tool_names:
        from rollgym.builtins.models import sandbox_play

        return sandbox_play.turn(messages, tool_names, correct, rng)
    if "read_key" in tool_names:
        return _keychain(messages, correct, rng)
    offered = [t for t in tools if str((t.get("function") or {}).get("name")) in tool_names]
    if offered and not _asks_to_compute(messages):
        from rollgym.builtins.models import tool_play

        return tool_play.turn(messages, offered, correct, rng, _text)
    return _arithmetic(messages, correct, rng)


def _asks_to_compute(messages: Sequence[Mapping[str, object]]) -> bool:
    return any(m.get("role") == "user" and _COMPUTE.search(_text(m)) is not None for m in messages)


def _text(message: Mapping[str, object]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _arithmetic(
    messages: Sequence[Mapping[str, object]], correct: bool, rng: random.Random
) -> Reply:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        found = _COMPUTE.search(_text(message))
        if found is None:
            continue
        try:
            value = evaluate(found.group(1).splitlines()[0])
        except ValueError:
            break
        if not correct:
            value += rng.choice([-10, -3, -2, -1, 1, 2, 3, 10])
        return Reply(content=f"Answer: {format_number(value)}")
    return Reply(content="Answer: I do not know")


def _keychain(messages: Sequence[Mapping[str, object]], correct: bool, rng: random.Random) -> Reply:
    last = messages[-1]
    if last.get("role") == "tool":
        text = _text(last)
        secret = _SECRET.search(text)
        if secret is not None:
            value = secret.group(1) if correct else _corrupt(secret.group(1), rng)
            return Reply(content=f"Answer: {value}")
        next_key = _NEXT_KEY.search(text)
        if next_key is not None:
            if not correct and rng.random() < 0.5:  # gives up and guesses
                return Reply(content=f"Answer: S-{''.join(rng.choice(_HEX) for _ in range(12))}")
            return Reply(tool_call=("read_key", {"key": next_key.group(1)}))
        return Reply(content="Answer: I could not find the secret")
    for message in reversed(messages):
        start = _START_KEY.search(_text(message)) if message.get("role") == "user" else None
        if start is not None:
            return Reply(tool_call=("read_key", {"key": start.group(1)}))
    return Reply(content="Answer: I do not know where to start")


def _corrupt(secret: str, rng: random.Random) -> str:
    """The secret with one hex digit changed: plausible, and wrong."""
    index = rng.randrange(2, len(secret)) if len(secret) > 2 else 0
    choices = [c for c in _HEX if c != secret[index]]
    return secret[:index] + rng.choice(choices) + secret[index + 1 :]
