"""Small agent servers for end-to-end tests: each misbehaves in one precise, countable way.

They are real rollgym agents (``rollgym.servers.agent.Agent`` subclasses) launched by the real
launcher as ``impl: agents:<Class>`` (tests/e2e is on PYTHONPATH for the driver and servers).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

import aiohttp
from pydantic import Field

from rollgym.server_options import ServerOptions
from rollgym.servers.agent import Agent, AgentOptions
from rollgym.servers.rollout_context import RolloutContext


class EchoOptions(AgentOptions):
    delay_s: float = Field(0.0, ge=0, description="Seconds to hold each request.")


class EchoAgent(Agent):
    """Answers ``reward = row['score']`` (default 1.0) and echoes the row it was sent."""

    Options: ClassVar[type[ServerOptions]] = EchoOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        delay = self.options.delay_s  # type: ignore[attr-defined]
        if delay:
            await asyncio.sleep(delay)
        return {"reward": row.get("score", 1.0), "row": row, "pid": os.getpid()}


class FailFirstAttemptAgent(Agent):
    """Fails (HTTP 500) on attempt 0 and succeeds on every later attempt."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        if row.get("attempt", 0) == 0:
            raise RuntimeError("first attempts always fail here")
        return {"reward": 1.0, "attempt_seen": row["attempt"]}


class AlwaysFailAgent(Agent):
    """Fails every attempt with HTTP 500: retries are exhausted."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        raise RuntimeError("this agent always fails")


class NoRewardAgent(Agent):
    """Answers an object without a numeric ``reward``."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        return {"answer": "42", "reward": "high"}


class DyingOptions(AgentOptions):
    die_after: int = Field(5, ge=1, description="Requests served before the process exits.")
    delay_s: float = Field(0.05, ge=0)


class DyingAgent(Agent):
    """Serves ``die_after`` requests, then the whole process exits (killed mid-run)."""

    Options: ClassVar[type[ServerOptions]] = DyingOptions
    served = 0

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        type(self).served += 1
        if type(self).served > self.options.die_after:  # type: ignore[attr-defined]
            os._exit(3)
        await asyncio.sleep(self.options.delay_s)  # type: ignore[attr-defined]
        return {"reward": 1.0}


class UntracedScopedAgent(Agent):
    """An agent that knows only the base URL it is given: it posts its model call with a
    plain aiohttp session (no ``traceparent``, no ``X-Request-Id``, nothing instrumented) to
    ``rollout.model_base_url``. Its calls must still be attributed to the rollout and join
    the rollout's trace, from the URL alone."""

    _session: ClassVar[aiohttp.ClientSession | None] = None

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        if UntracedScopedAgent._session is None:
            connector = aiohttp.TCPConnector(limit=0)
            UntracedScopedAgent._session = aiohttp.ClientSession(connector=connector)
        body = {"model": "policy", "messages": [{"role": "user", "content": "what is 2 + 2?"}]}
        url = rollout.model_base_url + "/chat/completions"
        async with UntracedScopedAgent._session.post(url, json=body) as response:
            sent = {k.lower() for k in response.request_info.headers}
            answer = await response.json()
        return {"reward": 1.0, "answer_id": answer.get("id"), "sent_headers": sorted(sent)}


class SayRowTextAgent(Agent):
    """Fails every attempt with the row's ``text`` as its error (HTTP 500): what a server's
    message quoting a model's answer looks like to the driver."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        raise RuntimeError(str(row.get("text", "")))
