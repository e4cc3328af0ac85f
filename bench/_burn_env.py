"""A CPU-bound environment for the replica benchmark: every call burns 5 ms of CPU.

``BurnEnv`` spends :data:`BURN_S` of its own CPU time (not wall time: a busy machine makes it
take longer, never shorter) in ``seed`` and in ``verify``, on its event loop, as a verifier
or a sandbox would. ``SeedVerifyAgent`` seeds and verifies, with no model in between, so the
environment is what limits the throughput.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rollgym.server_options import ServerOptions
from rollgym.servers.agent import Agent, AgentOptions, task_of
from rollgym.servers.environment import Environment, EnvironmentOptions, SessionState, Verdict
from rollgym.servers.rollout_context import RolloutContext

BURN_S = 0.005


def burn(seconds: float = BURN_S) -> None:
    """Spin until this thread has used ``seconds`` of CPU."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


class BurnEnv(Environment):
    """Seed and verify each cost 5 ms of CPU; every answer is right."""

    Options: ClassVar[type[ServerOptions]] = EnvironmentOptions

    async def seed(self, task: dict[str, Any]) -> SessionState:
        burn()
        return SessionState(messages=[{"role": "user", "content": "burn"}])

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        burn()
        return Verdict(reward=1.0)


class SeedVerifyOptions(AgentOptions):
    environment: str


class SeedVerifyAgent(Agent):
    """Seed a session, verify at once: two environment calls per rollout, no model."""

    Options: ClassVar[type[ServerOptions]] = SeedVerifyOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        await rollout.env.seed(task_of(row))
        verdict = await rollout.env.verify("done")
        return {"reward": verdict.get("reward")}
