"""A minimal loopback agent for the benchmarks: ``POST /run`` -> ``{"reward": 1}``.

Run as its own process (``python bench/_minimal_agent.py --hold 5``) so the driver being
measured does not share an event loop with it. It prints its base URL on the first stdout line.
``/health`` answers like a rollgym server, so a job can use it as ``url:`` server.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from rollgym import event_loop

_REWARD = b'{"reward":1}'


def build_app(hold_s: float) -> web.Application:
    async def run(request: web.Request) -> web.Response:
        await request.read()
        if hold_s:
            await asyncio.sleep(hold_s)
        return web.Response(body=_REWARD, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "name": "minimal", "kind": "agent"})

    async def aggregate(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/run", run)
    app.router.add_get("/health", health)
    app.router.add_post("/aggregate_metrics", aggregate)
    return app


async def serve(hold_s: float) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    runner = web.AppRunner(build_app(hold_s), access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock, backlog=16384)
    await site.start()
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


class AgentProcess:
    """Start the agent as a child process; ``url`` once it listens; ``stop()`` kills it."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "--hold", str(hold_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise RuntimeError("the minimal agent did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to hold each request")
    args = parser.parse_args()
    event_loop.run(serve(args.hold))


if __name__ == "__main__":
    main()
