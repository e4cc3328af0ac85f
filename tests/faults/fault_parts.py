"""A fault-injecting agent and environment: each row says which fault it meets, and when.

They are real rollgym servers launched by the real launcher (``impl: fault_parts:<Class>``;
this folder is on PYTHONPATH for the driver and the servers). A row's ``fault`` field picks
the fault; a fault ending in ``_once`` happens on attempt 0 only, so a retry succeeds:

- ``ok``: reward 1.0 (after ``delay_s``);
- ``5xx`` / ``5xx_once``: HTTP 503; ``429`` / ``429_once``: HTTP 429;
- ``hang``: never answers (the attempt times out);
- ``no_reward``: an answer without a reward (permanent);
- ``die_once``: the whole process exits with status 9 mid-request (like ``kill -9``);
- ``env_5xx_once``: the environment's ``/verify`` answers 503 (the agent answers 502).

Every answered rollout is appended to ``<log_dir>/<server>.served`` (one line per rollout
id), so a test can tell a rollout that ran twice from one that was recorded twice.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from rollgym.errors import HTTPError
from rollgym.server_options import ServerOptions
from rollgym.servers import AgentOptions, EnvironmentOptions
from rollgym.servers.agent import Agent
from rollgym.servers.environment import Environment, SessionState
from rollgym.servers.model import ChatRequest, ModelServer
from rollgym.servers.rollout_context import RolloutContext


def _fault(row: dict[str, Any]) -> str:
    fault = str(row.get("fault", "ok"))
    if fault.endswith("_once"):
        return fault[: -len("_once")] if row.get("attempt", 0) == 0 else "ok"
    return fault


class FaultAgentOptions(AgentOptions):
    delay_s: float = Field(0.02, ge=0, description="Time each ok rollout takes.")
    log_dir: str | None = Field(None, description="Where <name>.served is appended.")
    start_delay_s: float = Field(0.0, ge=0, description="Time start-up takes before healthy.")
    hold_file: str | None = Field(
        None, description="While this file exists, ok rollouts wait before they answer."
    )


class FaultAgent(Agent):
    """Meets the fault its row names; with an ``environment``, seeds and verifies there."""

    Options: ClassVar[type[ServerOptions]] = FaultAgentOptions
    options: FaultAgentOptions

    async def on_startup(self) -> None:
        await super().on_startup()
        options = self.options
        await asyncio.sleep(options.start_delay_s)

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        options = self.options
        fault = _fault(row)
        if fault == "die":
            os._exit(9)
        if fault == "5xx":
            raise HTTPError(503, "injected 5xx")
        if fault == "429":
            raise HTTPError(429, "injected 429")
        if fault == "hang":
            await asyncio.sleep(3600)
        await asyncio.sleep(options.delay_s)
        while options.hold_file is not None and Path(options.hold_file).exists():
            await asyncio.sleep(0.05)
        if fault == "no_reward":
            return {"answer": "no reward here"}
        reward = 1.0
        if options.environment is not None:
            task = {"fault": fault}
            await rollout.env.seed(task)
            verdict = await rollout.env.verify("42")
            reward = float(verdict.get("reward", 0.0))
        if options.log_dir:
            with open(Path(options.log_dir) / f"{self.context.name}.served", "a") as out:
                out.write(f"{rollout.rollout_id}\n")
        return {"reward": reward}


class FaultEnvOptions(EnvironmentOptions):
    die_after_start_s: float | None = Field(
        None, description="Exit with status 7 this long after start-up (healthy, then dead)."
    )


class FaultEnv(Environment):
    """Verifies every answer as correct, unless the task's fault is ``env_5xx``."""

    Options: ClassVar[type[ServerOptions]] = FaultEnvOptions
    options: FaultEnvOptions

    async def on_startup(self) -> None:
        await super().on_startup()
        options = self.options
        if options.die_after_start_s is not None:
            asyncio.get_running_loop().call_later(options.die_after_start_s, os._exit, 7)

    async def seed(self, task: dict[str, Any]) -> SessionState:
        return SessionState(messages=[], data={"fault": task.get("fault")})

    async def verify(self, state: SessionState, answer: str | None) -> float:
        if state.data.get("fault") == "env_5xx":
            raise HTTPError(503, "injected environment 5xx")
        return 1.0


class KeyRefusingModel(ModelServer):
    """An upstream engine that refuses every request's key with HTTP 401 (a bad API key)."""

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        raise HTTPError(401, "invalid api key")
