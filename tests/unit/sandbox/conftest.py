"""Fixtures of the sandbox tests (helpers in ``sandbox_support.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sandbox_support import LIMITS

from rollgym.sandbox import SandboxPool


@pytest.fixture(params=[True, False], ids=["cgroup", "rlimits-only"])
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[SandboxPool]:
    """A started pool; each test runs with per-exec cgroups (where this machine allows them)
    and without (what a server without a writable cgroup v2 hierarchy gets)."""
    pool = SandboxPool(LIMITS, warm=2, max_sandboxes=8, use_cgroups=request.param)
    await pool.start()
    if not request.param:
        assert pool.cgroup is None
    try:
        yield pool
    finally:
        await pool.close()
