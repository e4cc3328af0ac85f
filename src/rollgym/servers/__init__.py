"""Server base classes: write an agent, an environment or a model server by subclassing one.

The launcher (:mod:`rollgym.placement.launcher`) starts them as local processes through
:mod:`rollgym.servers.serve`; :func:`rollgym.servers.registry.resolve_impl` turns a config's
``impl`` into the class. Names are imported on first use, so the driver (which only needs the
registry and the launcher) does not pay for FastAPI at import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollgym.servers.agent import Agent, AgentOptions
    from rollgym.servers.base import Server, ServerContext
    from rollgym.servers.environment import Environment, EnvironmentOptions, SessionState, Verdict
    from rollgym.servers.model import ChatRequest, ModelServer
    from rollgym.servers.rollout_context import RolloutContext, ServerCallError
    from rollgym.servers.tools import tool

_HOMES = {
    "Agent": "agent",
    "AgentOptions": "agent",
    "ChatRequest": "model",
    "Environment": "environment",
    "EnvironmentOptions": "environment",
    "ModelServer": "model",
    "RolloutContext": "rollout_context",
    "Server": "base",
    "ServerCallError": "rollout_context",
    "ServerContext": "base",
    "SessionState": "environment",
    "Verdict": "environment",
    "tool": "tools",
}

__all__ = [
    "Agent",
    "AgentOptions",
    "ChatRequest",
    "Environment",
    "EnvironmentOptions",
    "ModelServer",
    "RolloutContext",
    "Server",
    "ServerCallError",
    "ServerContext",
    "SessionState",
    "Verdict",
    "tool",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rollgym.servers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollgym.servers.{home}"), name)
