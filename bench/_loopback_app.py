"""Run an aiohttp app in a bench's helper process until the bench says stop.

Benches that need a receiver of their own (a naive OTLP sink, a counting collector) start it
in a child process so that its work does not share the bench's GIL; the child serves on an
ephemeral 127.0.0.1 port, sends that port over ``conn``, and stops at the next message.
"""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection

from aiohttp import web


async def serve_until_told(app: web.Application, conn: Connection) -> None:
    """Serve ``app`` on 127.0.0.1:<free port>, send the port, stop when ``conn`` has data."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    conn.send(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    try:
        while not conn.poll():
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()
