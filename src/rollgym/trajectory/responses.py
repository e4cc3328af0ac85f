"""A Responses API answer (``/v1/responses``, streamed or not) recorded as the chat completion
it amounts to, so a Responses call is one model turn like any chat call.

Why translate: the trajectory, the usage tally and the checks read one shape, the chat
completion's (``choices[].message``, ``finish_reason``, ``usage.prompt_tokens``). A ``response``
object says the same things in other names: its ``output`` items are the assistant message's
text and tool calls, its ``status`` and ``incomplete_details`` the finish reason, its
``usage.input_tokens`` / ``output_tokens`` the prompt and completion tokens. A streamed
response ends with one event that carries the whole ``response`` (``response.completed``,
``response.incomplete`` or ``response.failed``); a stream without it was cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rollgym.policy_versions as policy_versions
from rollgym.trajectory.completeness import STREAM_INCOMPLETE
from rollgym.trajectory.stream import SseJoiner

#: The events that end a Responses stream, each carrying the whole ``response``.
TERMINAL_EVENTS = frozenset(("response.completed", "response.incomplete", "response.failed"))
#: ``incomplete_details.reason`` in chat's finish reasons.
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
#: What a model server stamps on an answer about its policy version (kept as they are).
_VERSION_KEYS = (
    policy_versions.ANSWER_KEY,
    policy_versions.ANSWER_END_KEY,
    policy_versions.ENGINE_KEY,
    policy_versions.TOKEN_SPANS_KEY,
)


def _text_of(item: Mapping[str, object]) -> str:
    content = item.get("content")
    parts = content if isinstance(content, list) else []
    return "".join(
        str(part.get("text") or "")
        for part in parts
        if isinstance(part, Mapping) and part.get("type") in ("output_text", "text")
    )


def _finish_reason(response: Mapping[str, object], has_calls: bool) -> str | None:
    status = response.get("status")
    if status == "completed":
        return "tool_calls" if has_calls else "stop"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return _INCOMPLETE_REASONS.get(str(reason), "length")
    return None  # in_progress, failed, cancelled: no whole answer


def _usage(usage: object) -> dict[str, object] | None:
    if not isinstance(usage, Mapping):
        return None
    chat: dict[str, object] = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "total_tokens": usage.get("total_tokens"),
    }
    details = usage.get("input_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        chat["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    return chat


def as_chat_completion(response: Mapping[str, object]) -> dict[str, Any]:
    """The ``chat.completion`` a ``response`` object amounts to (one choice)."""
    output = response.get("output")
    items = [i for i in output if isinstance(i, Mapping)] if isinstance(output, list) else []
    text = "".join(_text_of(item) for item in items if item.get("type") == "message")
    calls = [
        {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
        }
        for item in items
        if item.get("type") == "function_call"
    ]
    message: dict[str, object] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    answer: dict[str, Any] = {
        "id": response.get("id"),
        "object": "chat.completion",
        "created": response.get("created_at"),
        "model": response.get("model"),
        "status": response.get("status"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": _finish_reason(response, bool(calls))}
        ],
        "usage": _usage(response.get("usage")),
    }
    for key in _VERSION_KEYS:
        if key in response:
            answer[key] = response[key]
    return answer


class ResponsesStreamJoiner(SseJoiner):
    """Fed a Responses stream's bytes in any pieces; :meth:`answer` is the chat completion the
    stream amounts to: the terminal event's ``response``, or, for a stream cut before it,
    what arrived (the text deltas and the finished items), marked incomplete."""

    def __init__(self) -> None:
        super().__init__()
        self._response: dict[str, Any] = {}
        self._text: list[str] = []
        self._items: list[object] = []

    def _data(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        response = data.get("response")
        if isinstance(response, dict):
            self._response = response
            if kind in TERMINAL_EVENTS:
                self.done = True
        elif kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            self._text.append(data["delta"])
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            self._items.append(data["item"])

    def answer(self) -> dict[str, Any]:
        self.feed(b"\n\n")  # a last event without its blank line
        if self.done:
            return as_chat_completion(self._response)
        calls = [i for i in self._items if isinstance(i, dict) and i.get("type") != "message"]
        text = [{"type": "output_text", "text": "".join(self._text)}]
        partial = {
            **self._response,
            "status": "in_progress",
            "output": [{"type": "message", "content": text}, *calls],
        }
        answer = as_chat_completion(partial)
        answer[STREAM_INCOMPLETE] = True
        return answer
