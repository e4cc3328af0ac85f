"""The tool-loop agent: multi-turn tool calling until the model answers or ``max_turns``.

The loop itself lives in :mod:`rollgym.servers.episode_loop`, shared with an environment's
episode ``/run``, so both play an episode the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rollgym.builtins.agents.options import ToolLoopOptions
from rollgym.servers import (
    Agent,
    RolloutContext,
    ServerOptions,
    play_tool_loop,
    task_of,
)


class ToolLoopAgent(Agent):
    """Alternate model turns and tool calls, then verify the final answer."""

    Options: ClassVar[type[ServerOptions]] = ToolLoopOptions
    options: ToolLoopOptions

    async def run(self, row: Mapping[str, object], rollout: RolloutContext) -> dict[str, Any]:
        return await play_tool_loop(rollout, task_of(row), max_turns=self.options.max_turns)
