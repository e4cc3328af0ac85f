"""Whether spans carry content (tool arguments and results, a model call's messages), and how
much of it.

Content is what a user's data and a model's words are made of: it may hold secrets or
personal data, and it is large. So it stays off spans unless the user turned capture on
(``telemetry.capture_content: true``, or the standard
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` that OpenTelemetry's GenAI
instrumentations read), and each value is cut to ``telemetry.capture_max_bytes`` UTF-8 bytes,
the trajectory's limit for one text by default. Set once at setup, read by the span helpers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import orjson

#: The most UTF-8 bytes one captured value keeps: the trajectory's limit for one text.
CAPTURE_MAX_BYTES: Final = 64 * 1024
#: What ends a value that was cut.
TRUNCATED_MARK: Final = "…[truncated]"


class _Capture:
    """The process's capture switch; hot paths read ``capture.content``."""

    __slots__ = ("content", "max_bytes")

    def __init__(self) -> None:
        self.content = False
        self.max_bytes = CAPTURE_MAX_BYTES


#: The one switch of this process: off until telemetry is set up with capture on.
capture: Final = _Capture()


def configure_capture(content: bool, max_bytes: int = CAPTURE_MAX_BYTES) -> None:
    """Turn content capture on or off for this process (at setup, and by tests)."""
    capture.content = content
    capture.max_bytes = max(1, max_bytes)


def captured_text(value: object) -> str:
    """``value`` as span text: a string as it is, anything else as JSON, cut to the limit.

    A cut value ends with :data:`TRUNCATED_MARK`, never inside a UTF-8 character.
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):
            text = repr(value)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= capture.max_bytes:
        return text
    return data[: capture.max_bytes].decode("utf-8", "ignore") + TRUNCATED_MARK


def _cut(value: object) -> object:
    """A text cut to the limit; anything else as it is."""
    return captured_text(value) if isinstance(value, str) else value


def _parts(message: Mapping[str, object]) -> list[dict[str, object]]:
    """An OpenAI chat message's content and tool calls as GenAI ``parts``, texts cut."""
    parts: list[dict[str, object]] = []
    content = message.get("content")
    if message.get("role") == "tool":
        return [
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": _cut(content),
            }
        ]
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": captured_text(content)})
    elif isinstance(content, list):
        for item in content:
            if isinstance(item, Mapping) and isinstance(item.get("text"), str):
                parts.append({"type": "text", "content": captured_text(item["text"])})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": _cut(function.get("arguments")),
                }
            )
    return parts


def input_messages(messages: Sequence[object]) -> str:
    """``gen_ai.input.messages``: the request's messages in the GenAI conventions' shape (role
    and parts), each text cut to the limit, as JSON."""
    out = [
        {"role": message.get("role"), "parts": _parts(message)}
        for message in messages
        if isinstance(message, Mapping)
    ]
    return orjson.dumps(out, default=str).decode()


def output_messages(answer: Mapping[str, object]) -> str:
    """``gen_ai.output.messages``: each choice's message with its finish reason, as JSON."""
    choices = answer.get("choices")
    out = []
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if isinstance(message, Mapping):
            out.append(
                {
                    "role": message.get("role") or "assistant",
                    "parts": _parts(message),
                    "finish_reason": choice.get("finish_reason"),
                }
            )
    return orjson.dumps(out, default=str).decode()
