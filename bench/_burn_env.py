"""Replica-bound environments for the replica benchmark: each call costs a replica 5 ms.

``BurnEnv`` spends :data:`BURN_S` of its own CPU time (not wall time: a busy machine makes it
take longer, never shorter) in ``seed`` and in ``verify``, on its event loop, as a verifier
would. Two replicas of it can only go twice as fast with two cores free for them alone.

``HoldEnv`` holds its one slot for :data:`BURN_S` of wall time in each call and serves one call
at a time, as a replica fronting one sandbox or one accelerator does: its capacity is per
replica and costs almost no CPU, so a second replica doubles it whatever the driver costs.

``SeedVerifyAgent`` seeds and verifies, with no model in between, so the environment is what
limits the throughput.
"""

from __future__ import annotations

import asyncio
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


class HoldEnv(Environment):
    """One call at a time per replica, each holding the slot 5 ms; every answer is right."""

    Options: ClassVar[type[ServerOptions]] = EnvironmentOptions

    async def on_startup(self) -> None:
        await super().on_startup()
        self.slot = asyncio.Lock()

    async def _hold(self) -> None:
        async with self.slot:
            await asyncio.sleep(BURN_S)

    async def seed(self, task: dict[str, Any]) -> SessionState:
        await self._hold()
        return SessionState(messages=[{"role": "user", "content": "hold"}])

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        await self._hold()
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
