"""The text of an OpenAI chat message's ``content``: a string, or a list of content parts."""

from __future__ import annotations

from typing import Any


def content_text(content: object) -> str:
    """The text of ``content``: a string as it is, content parts' ``text`` joined, else ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": ...}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def wire_messages(messages: list[Any]) -> list[Any]:
    """``messages`` in the form every engine accepts: an assistant message that carries tool
    calls and no content gets ``"content": ""``.

    The OpenAI API allows ``content: null`` there and models answer with it, but some
    OpenAI-compatible servers refuse it when it is sent back (llama-cpp-python's answers 500),
    so whatever echoes a conversation to an engine sends the empty string instead. The list is
    copied only when a message changes; the caller's messages are never modified.
    """
    out = messages
    for index, message in enumerate(messages):
        if (
            isinstance(message, dict)
            and message.get("role") == "assistant"
            and message.get("content") is None
            and message.get("tool_calls")
        ):
            if out is messages:
                out = list(messages)
            out[index] = {**message, "content": ""}
    return out
