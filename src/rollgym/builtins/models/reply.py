"""What the simulated policies answer: one assistant message (a text or one tool call).

Its own module so that :mod:`~rollgym.builtins.models.policy` (which picks a game) and the
games it delegates to (:mod:`~rollgym.builtins.models.sandbox_play`) both import it
without importing each other: imports run downwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    """The assistant's next message: a text, or one tool call (name, arguments)."""

    content: str | None = None
    tool_call: tuple[str, dict[str, Any]] | None = None
    #: The tool call's ``arguments`` text when it is not the JSON of the dict above: what a
    #: real engine sometimes writes (``true``), played by the ``tool_argument_mistakes`` knob.
    arguments_text: str | None = None
