"""A trajectory read as a conversation: the messages a person (or an SFT loader) wants to see.

A trajectory stores each model call's request as a *delta* (``messages_start`` + the new
``messages``) so a long rollout stays linear in size. Reading it back takes two views, both
built here, once, for the terminal, the viewer and the Parquet export alike:

* :func:`full_messages`: the whole message list of the rollout as the model last saw it,
  followed by its final answer: what an SFT table's ``messages`` column holds.
* :func:`conversation`: the rollout in the order things happened, one entry per message, tool
  call and verification, with per-model-call figures (tokens in and out, finish reason) and the
  truncation marks the recorder left; what ``traces show --conversation`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from rollgym.trajectory.messages import same_message


class Entry(TypedDict, total=False):
    """One step of the conversation view."""

    kind: Literal["message", "answer", "tool", "verify"]
    role: str
    content: str | None
    tool_calls: list[Mapping[str, object]]
    #: model calls: the call index, its usage and finish reason, its response id
    call: int
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    response_id: str | None
    #: the model call's latency, where the trace store has its model span
    latency_ms: float | None
    #: a tool turn
    name: str
    arguments: object
    output: str
    #: a text cut at the recorder's cap: the whole size in bytes
    truncated_bytes: int
    #: the verification
    answer: str | None
    reward: float | None


def _turns(trajectory: Mapping[str, object]) -> list[dict[str, Any]]:
    turns = trajectory.get("turns")
    return [turn for turn in turns if isinstance(turn, dict)] if isinstance(turns, list) else []


def _messages(value: object) -> list[dict[str, Any]]:
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _start(turn: Mapping[str, object]) -> int:
    start = turn.get("messages_start")
    return start if isinstance(start, int) and start >= 0 else 0


def _after(previous: list[dict[str, object]], turn: Mapping[str, object]) -> list[dict[str, Any]]:
    """The messages a model turn's request had, then its answer, ``previous`` being the
    messages before it (the previous request's and its answer)."""
    request = previous[: _start(turn)] + _messages(turn.get("messages"))
    message = turn.get("message")
    return [*request, message] if isinstance(message, dict) else request


def full_messages(trajectory: Mapping[str, object]) -> list[dict[str, object]]:
    """Every message of the rollout's last model call, then that call's answer."""
    previous: list[dict[str, object]] = []
    for turn in _turns(trajectory):
        if turn.get("type") == "model":
            previous = _after(previous, turn)
    return previous


def _resent(previous: list[dict[str, object]], turn: Mapping[str, object]) -> int:
    """How many of a turn's first new messages are messages already shown, sent again in
    another spelling (a trajectory recorded before such spellings were recognised stored
    them as new)."""
    start = _start(turn)
    count = 0
    for index, message in enumerate(_messages(turn.get("messages")), start):
        if index >= len(previous) or not same_message(previous[index], message):
            break
        count += 1
    return count


def _last_model_turn(trajectory: Mapping[str, object]) -> dict[str, object] | None:
    models = [turn for turn in _turns(trajectory) if turn.get("type") == "model"]
    return models[-1] if models else None


def completion_text(trajectory: Mapping[str, object]) -> str | None:
    """The text of the model's final answer (None when the last call answered no text)."""
    turn = _last_model_turn(trajectory)
    message = turn.get("message") if turn else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def finish_reason(trajectory: Mapping[str, object]) -> str | None:
    """The finish reason of the last model call (``stop``, ``length``, ``tool_calls``, ...)."""
    turn = _last_model_turn(trajectory)
    reason = turn.get("finish_reason") if turn else None
    return reason if isinstance(reason, str) else None


def _usage(turn: Mapping[str, object], key: str) -> int | None:
    usage = turn.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) else None


def _model_entries(turn: dict[str, Any], skip_tool_messages: bool, resent: int = 0) -> list[Entry]:
    cut = {
        item.get("message"): item.get("bytes")
        for item in turn.get("truncated_messages") or []
        if isinstance(item, dict)
    }
    entries: list[Entry] = []
    for index, message in enumerate(_messages(turn.get("messages"))):
        if index < resent:
            continue  # shown already, as the message it repeats
        role = str(message.get("role", "?"))
        if role == "tool" and skip_tool_messages:
            continue  # shown as the tool turn that produced it, with its arguments
        entry: Entry = {"kind": "message", "role": role, "content": message_text(message)}
        size = cut.get(index)
        if isinstance(size, int):
            entry["truncated_bytes"] = size
        if message.get("tool_calls"):
            entry["tool_calls"] = list(message["tool_calls"])
        entries.append(entry)
    reply = turn.get("message")
    answer: dict[str, Any] = reply if isinstance(reply, dict) else {}
    call = turn.get("call")
    entry = Entry(
        kind="answer",
        role="assistant",
        content=message_text(answer),
        call=call if isinstance(call, int) else len(entries),
        input_tokens=_usage(turn, "prompt_tokens"),
        output_tokens=_usage(turn, "completion_tokens"),
        finish_reason=turn.get("finish_reason"),
        response_id=turn.get("response_id"),
    )
    if answer.get("tool_calls"):
        entry["tool_calls"] = list(answer["tool_calls"])
    entries.append(entry)
    return entries


def message_text(message: Mapping[str, object]) -> str | None:
    """A message's text: a string content, or the text parts of a list content."""
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(part for part in parts if isinstance(part, str))
    return str(content)


def conversation(trajectory: Mapping[str, object]) -> list[Entry]:
    """The rollout in order: messages, each model answer, each tool call, the verification."""
    entries: list[Entry] = []
    tool_since_model = False
    previous: list[dict[str, object]] = []
    for turn in _turns(trajectory):
        kind = turn.get("type")
        if kind == "model":
            resent = _resent(previous, turn)
            entries += _model_entries(turn, tool_since_model, resent)
            previous = _after(previous, turn)
            tool_since_model = False
        elif kind == "tool":
            tool: Entry = {
                "kind": "tool",
                "name": str(turn.get("name", "?")),
                "arguments": turn.get("arguments"),
                "output": str(turn.get("output", "")),
            }
            if turn.get("truncated") and isinstance(turn.get("output_bytes"), int):
                tool["truncated_bytes"] = turn["output_bytes"]
            entries.append(tool)
            tool_since_model = True
        elif kind == "verify":
            reward = turn.get("reward")
            entries.append(
                Entry(
                    kind="verify",
                    answer=turn.get("answer"),
                    reward=float(reward) if isinstance(reward, int | float) else None,
                )
            )
    return entries
