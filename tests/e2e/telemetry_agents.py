"""Agent servers for the telemetry end-to-end tests, each exposing one thing a test asserts on.

Real rollgym agents launched by the real launcher as ``impl: telemetry_agents:<Class>``
(tests/e2e is on PYTHONPATH for the driver and the servers).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from urllib.parse import quote

import aiohttp
from fastapi import Request
from starlette.responses import Response

from rollgym.servers import AgentOptions
from rollgym.servers.agent import Agent, task_of
from rollgym.servers.rollout_context import RolloutContext

_HEADERS: ContextVar[dict[str, str] | None] = ContextVar("telemetry_agents_headers", default=None)


class HeaderEchoAgent(Agent):
    """Answers ``reward = 1`` and the HTTP headers its ``/run`` request arrived with.

    Why: "with tracing off no ``traceparent`` is injected" is a property of what the agent
    received, so the agent itself reports it.
    """

    async def _handle_run(self, request: Request) -> Response:
        token = _HEADERS.set({k.lower(): v for k, v in request.headers.items()})
        try:
            return await super()._handle_run(request)
        finally:
            _HEADERS.reset(token)

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        return {"reward": 1.0, "headers": _HEADERS.get() or {}, "rollout_id": rollout.rollout_id}


class BareModelAgent(Agent):
    """An "unmodified" agent: calls the model through the rollout-scoped base URL with its own
    aiohttp session, forwarding no ``traceparent`` and no ``X-Request-Id``.

    The model server must still attribute the call to the rollout (from the URL alone).
    """

    Options = AgentOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        options = self.options
        assert options.model is not None
        assert rollout.rollout_id is not None
        base = self.context.url_of(options.model)
        url = f"{base}/r/{quote(rollout.rollout_id, safe='')}/v1/chat/completions"
        body = {"model": "bare", "messages": [{"role": "user", "content": "say hi"}]}
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
            sent = {k.lower(): v for k, v in response.request_info.headers.items()}
            answer = await response.json()
        return {"reward": 1.0, "answer_id": answer.get("id"), "sent_headers": sent}


class SdkAgent(Agent):
    """A single-turn agent written with the official OpenAI SDK (``rollout.async_openai()``),
    the way a user who already has an SDK agent writes one. Its answer says the request id
    the model server answered with, so the test can check the attribution."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        client = rollout.async_openai()
        completion = await client.chat.completions.create(
            model="policy", messages=seeded["messages"]
        )
        answer = completion.choices[0].message.content
        verdict = await rollout.env.verify(answer)
        usage = completion.usage.model_dump() if completion.usage is not None else None
        return {"reward": verdict["reward"], "completion_id": completion.id, "usage": usage}


class HeaderlessAgent(Agent):
    """Posts to the rollout-scoped model URL with no ``X-Request-Id`` (only the process's
    HttpClient, which forwards ``traceparent``): an unmodified agent that knows only its
    base URL. Its answer says which completion id came back."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        options = self.options
        assert options.model is not None
        seeded = await rollout.env.seed(task_of(row))
        url = self.context.url_of(options.model) + f"/r/{quote(str(rollout.rollout_id))}/v1"
        ids = []
        answer = None
        for _ in range(2):  # two turns: the proxy counts them
            response = await self.client.post_json(
                options.model,
                url + "/chat/completions",
                {"messages": seeded["messages"]},
                route="/r/{rollout_id}/v1/chat/completions",
            )
            ids.append(response.data["id"])
            answer = response.data["choices"][0]["message"]["content"]
        verdict = await rollout.env.verify(answer)
        return {"reward": verdict["reward"], "completion_ids": ids}
