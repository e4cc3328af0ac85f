"""An in-process loopback agent (aiohttp.web) the driver's unit tests dispatch to for real.

It is a tiny HTTP server on 127.0.0.1, not a mock of a rollgym component: the Collector, its
HttpClient and every layer down to the socket run unchanged against it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from aiohttp_loopback import serve_on_loopback

Handler = Callable[[dict[str, Any]], Awaitable[tuple[int, Any]]]


class LoopbackAgent:
    """Serves ``POST /run`` (and ``/aggregate_metrics``) with a per-test behaviour."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.behaviour: Handler = self.reward_one
        self.in_flight = 0
        self.peak_in_flight = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    @staticmethod
    async def reward_one(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"reward": 1.0, "echo": body}

    async def _run(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.bodies.append(body)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            status, answer = await self.behaviour(body)
        finally:
            self.in_flight -= 1
        if isinstance(answer, bytes | str):
            return web.Response(status=status, body=answer)
        return web.Response(
            status=status, body=orjson.dumps(answer), content_type="application/json"
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/run", self._run)
        # handlers still sleeping at teardown are cancelled at once, not awaited
        self._runner, port = await serve_on_loopback(app, access_log=None, shutdown_timeout=0.1)
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def collect_all(stream: Any) -> list[Any]:
    return [outcome async for outcome in stream]
