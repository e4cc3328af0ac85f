"""Shared helpers for server unit tests: serve a real app in-process on a loopback port.

Each app runs under uvicorn on 127.0.0.1 in the test's own event loop and is reached through
the real HttpClient, so the tests exercise the same HTTP path the processes use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import uvicorn

from rollgym.http.client import HttpClient
from rollgym.http.server import create_app
from rollgym.servers.base import Server
from rollgym.servers.server_process import bind_loopback
from rollgym.telemetry.groups import configure_gate


@asynccontextmanager
async def _serving(server: Server) -> AsyncIterator[str]:
    sock = bind_loopback()
    config = uvicorn.Config(
        create_app(server), log_level="warning", access_log=False, lifespan="on"
    )
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv._serve(sockets=[sock]))
    try:
        for _ in range(500):
            if uv.started or task.done():
                break
            await asyncio.sleep(0.01)
        if task.done():
            task.result()
            raise RuntimeError("server stopped during start-up")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        uv.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


@pytest.fixture
def serving() -> Callable[[Server], AbstractAsyncContextManager[str]]:
    """``async with serving(server) as url``: the server's app on a free loopback port."""
    return _serving


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    async with HttpClient() as http:
        yield http


@pytest.fixture(autouse=True)
def _gate_off() -> Iterator[None]:
    """Every test starts and ends with telemetry off, whatever it switched on."""
    configure_gate(frozenset(), tracing_active=False)
    yield
    configure_gate(frozenset(), tracing_active=False)
