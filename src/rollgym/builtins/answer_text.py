"""Where the final answer sits in a model's reply: after the last ``Answer:``, else all of it.

The built-in prompts ask for ``Answer: <value>``; being lenient about the rest of the text
keeps the reward about the answer, not about formatting.
"""

from __future__ import annotations

import re

_MARKER = re.compile(r"answer\s*:", re.IGNORECASE)


def extract_answer(text: str | None) -> str:
    """The answer part of a reply ('' for no reply)."""
    if not text:
        return ""
    matches = list(_MARKER.finditer(text))
    tail = text[matches[-1].end() :] if matches else text
    return tail.strip().strip("`*").strip().rstrip(".").strip()
