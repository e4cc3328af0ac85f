"""An aiohttp app served on a fresh loopback port, for tests that need a real HTTP peer.

Several tests stand up a tiny aiohttp server in their own event loop (an agent, an engine, a
health route): one copy of the runner, site and port lookup here, through aiohttp's public
``AppRunner.addresses`` rather than the site's private server.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def serve_on_loopback(
    app: web.Application, **runner_options: Any
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on 127.0.0.1 at a port the OS picks; returns the runner (``cleanup()``
    it when done) and the port. ``runner_options`` go to ``web.AppRunner``."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port: int = runner.addresses[0][1]
    return runner, port
