"""A rollout played under its ``gym.rollout`` span when the ``rollout`` group is on.

Both places a server plays a whole rollout (an agent's ``/run``, an environment's episode)
open the span the same way; with the group off the span module is never imported, so a
server with tracing off pays for one ``if``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from rollgym.telemetry.groups import gate

_Answer = TypeVar("_Answer")


async def under_rollout_span(
    rollout_id: str | None, agent_name: str, play: Awaitable[_Answer]
) -> _Answer:
    """Await ``play`` inside ``gym.rollout`` (when the gate says so); its answer.
    ``agent_name``: the server playing the rollout, the span's ``gen_ai.agent.name``."""
    if not gate.rollout:
        return await play
    from rollgym.telemetry import spans

    with spans.rollout_span(rollout_id, agent_name):
        return await play
