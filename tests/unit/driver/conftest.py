"""Fixtures of the driver's unit tests: real loopback HTTP agents (see ``loopback.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from loopback import LoopbackAgent


async def _running() -> AsyncIterator[LoopbackAgent]:
    """A started loopback agent, stopped when the test ends."""
    server = LoopbackAgent()
    await server.start()
    yield server
    await server.stop()


agent = pytest.fixture(_running, name="agent")
second_agent = pytest.fixture(_running, name="second_agent")
