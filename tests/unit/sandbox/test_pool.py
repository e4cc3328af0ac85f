"""The warm pool: exact accounting, waiters counted, concurrent acquires never collide."""

from __future__ import annotations

import asyncio

from sandbox_support import requires_sandbox

from rollgym.sandbox import SandboxLimits, SandboxPool
from waits import until

pytestmark = requires_sandbox


async def test_pool_accounting_is_exact_and_waiters_are_counted() -> None:
    pool = SandboxPool(SandboxLimits(), warm=1, max_sandboxes=2)
    await pool.start()
    first = await pool.acquire("a")
    second = await pool.acquire("b")
    third = asyncio.ensure_future(pool.acquire("c"))
    await until(lambda: pool.waiting, "the third acquire to wait for a sandbox")
    assert pool.waiting == 1 and not third.done()
    await pool.release(first)
    got = await asyncio.wait_for(third, 30)
    assert got.rollout_id == "c" and pool.waiting == 0
    await pool.release(second)
    await pool.close()  # destroys the one still out and the ready ones
    assert pool.stats.created == pool.stats.destroyed and pool.live == 0
    assert pool.cgroup is None or not pool.cgroup.exists()


async def test_concurrent_acquires_from_a_cold_pool_get_distinct_sandboxes() -> None:
    pool = SandboxPool(SandboxLimits(), warm=0, max_sandboxes=4)
    await pool.start()
    try:
        sandboxes = await asyncio.gather(*(pool.acquire(str(i)) for i in range(4)))
        assert len({s.sandbox_id for s in sandboxes}) == 4 and pool.live == 4
        results = await asyncio.gather(*(s.exec(["pwd"]) for s in sandboxes))
        assert all(r.stdout == "/work\n" for r in results)
        await asyncio.gather(*(pool.release(s) for s in sandboxes))
    finally:
        await pool.close()
    assert pool.stats.created == pool.stats.destroyed == 4 and pool.stats.execs == 4
