"""A `url:` agent on loopback that misbehaves on request, for the network-hardening e2e tests.

It runs in a thread of the test process (its own event loop), requires basic auth when given
credentials, and answers ``POST /run`` by the row's ``mode``: ``ok`` (reward 1), ``huge`` (an
answer of ``size`` bytes, chunked), ``redirect`` (302 to ``elsewhere``, another server).
"""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

from aiohttp import web

from aiohttp_loopback import serve_on_loopback


class HostileAgent:
    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials
        self.port = 0
        self.elsewhere = ""
        self.auth_seen: list[str | None] = []
        self.redirect_hits = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization")
        self.auth_seen.append(header)
        if self.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.credentials).encode()).decode()
        return header == f"Basic {expected}"

    async def _health(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        return web.json_response({"status": "ok", "name": "hostile", "kind": "agent"})

    async def _run(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        row: dict[str, Any] = await request.json()
        mode = row.get("mode", "ok")
        if mode == "redirect":
            raise web.HTTPFound(self.elsewhere + "/run")
        if mode == "huge":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            size, sent = int(row["size"]), 0
            try:
                await response.write(b'{"reward": 1.0, "answer": "')
                while sent < size:
                    await response.write(b"x" * 65536)
                    sent += 65536
                await response.write(b'"}')
            except (ConnectionResetError, RuntimeError):
                pass  # the driver hung up once it had read enough: what it should do
            return response
        return web.json_response({"reward": 1.0})

    async def _elsewhere(self, request: web.Request) -> web.StreamResponse:
        self.redirect_hits += 1
        return web.json_response({"reward": 0.0})

    async def _start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/health", self._health)
        app.router.add_post("/run", self._run)
        quick = {"access_log": None, "shutdown_timeout": 0.1}
        self._runner, self.port = await serve_on_loopback(app, **quick)
        other = web.Application()
        other.router.add_post("/run", self._elsewhere)
        self._other, other_port = await serve_on_loopback(other, **quick)
        self.elsewhere = f"http://127.0.0.1:{other_port}"

    def start(self) -> HostileAgent:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def url(self) -> str:
        user = f"{self.credentials[0]}:{self.credentials[1]}@" if self.credentials else ""
        return f"http://{user}127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def cleanup() -> None:
            for runner in (self._runner, self._other):
                if runner is not None:
                    await runner.cleanup()

        asyncio.run_coroutine_threadsafe(cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
