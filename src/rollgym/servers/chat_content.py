"""The text of an OpenAI chat message's ``content``: a string, or a list of content parts."""

from __future__ import annotations

from typing import Any


def content_text(content: Any) -> str:
    """The text of ``content``: a string as it is, content parts' ``text`` joined, else ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": ...}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
