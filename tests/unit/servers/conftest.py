"""Shared helpers for server unit tests: serve a real app in-process on a loopback port.

Each app runs under uvicorn on 127.0.0.1 in the test's own event loop and is reached through
the real HttpClient, so the tests exercise the same HTTP path the processes use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager

import pytest

from rollgym.http.client import HttpClient
from rollgym.http.server import create_app
from rollgym.servers.base import Server
from rollgym.telemetry.groups import configure_gate
from uvicorn_thread import uvicorn_in_loop


def _serving(server: Server) -> AbstractAsyncContextManager[str]:
    return uvicorn_in_loop(create_app(server), lifespan="on")


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
