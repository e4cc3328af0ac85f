"""Fixtures of the driver's unit tests: real loopback HTTP agents (see ``loopback.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from loopback import LoopbackAgent


@pytest.fixture
async def agent() -> AsyncIterator[LoopbackAgent]:
    server = LoopbackAgent()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def second_agent() -> AsyncIterator[LoopbackAgent]:
    server = LoopbackAgent()
    await server.start()
    yield server
    await server.stop()
