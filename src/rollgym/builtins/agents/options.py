"""The built-in agents' options, apart from the agents: the driver validates a config against
them without importing the agent stack (the registry names each one)."""

from __future__ import annotations

from pydantic import Field

from rollgym.servers import AgentOptions


class SingleTurnOptions(AgentOptions):
    model: str
    environment: str


class ToolLoopOptions(AgentOptions):
    model: str
    environment: str
    max_turns: int = Field(16, ge=1, description="Most model calls per rollout.")
