"""Fixtures of the sandbox tests (helpers in ``sandbox_support.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sandbox_support import LIMITS

from rollgym.sandbox import SandboxPool


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(LIMITS, warm=2, max_sandboxes=8)
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()
