"""A real OpenEnv MCP environment, written with openenv-core and FastMCP: its tools are the actions.

Two tools: ``hint()`` says the secret's parity, ``guess(number)`` tells whether the guess is
right. A correct guess ends the episode with reward 1.0 (this environment puts the reward and
the done flag on the tool's observation itself, as OpenEnv's MCP environments do).
"""

from __future__ import annotations

import random
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State


class ToolGuessEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("guess-tools")
        self._secret = 0
        self._state = State()

        @mcp.tool
        def hint() -> str:
            """Say whether the secret number is even or odd."""
            return "even" if self._secret % 2 == 0 else "odd"

        @mcp.tool
        def guess(number: int) -> str:
            """Guess the secret number (0 to 9)."""
            return "correct" if number == self._secret else "wrong"

        super().__init__(mcp)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._secret = random.Random(seed).randrange(10)
        self._state = State(episode_id=episode_id)
        return Observation(metadata={"task": "find the secret number"})

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        seen = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "guess":
            self._state.step_count += 1
            right = action.arguments.get("number") == self._secret
            seen.reward = 1.0 if right else 0.0
            seen.done = right
        return seen

    def _step_impl(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        return Observation(metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


app = create_app(ToolGuessEnvironment, CallToolAction, CallToolObservation, max_concurrent_envs=64)
