"""An agent author's agent that fails in its own code after it has called the model: the
failure's own frames (this file, :func:`parse_answer`'s line) and the turns recorded before
it failed must reach the failure record. Launched as ``impl: failing_user_agent:ParsingAgent``.
"""

from __future__ import annotations

from typing import Any

from rollgym.servers.agent import Agent
from rollgym.servers.rollout_context import RolloutContext


def parse_answer(text: str) -> int:
    """The author's own bug: the model's answer is not always a bare number."""
    return int(text.strip())  # PARSE LINE


class ParsingAgent(Agent):
    """Asks the model once, then parses its answer as an integer (which fails)."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        reply = await rollout.chat([{"role": "user", "content": str(row.get("question"))}])
        text = reply["choices"][0]["message"]["content"] or ""
        return {"reward": float(parse_answer(text))}
