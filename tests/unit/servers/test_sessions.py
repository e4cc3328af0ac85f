"""SessionStore: TTL expiry on use and by the sweeper."""

from __future__ import annotations

import asyncio

from rollgym.servers.sessions import SessionStore


async def test_use_refreshes_and_idle_sessions_expire():
    store: SessionStore[dict] = SessionStore(ttl_s=0.2)
    kept = store.create("r-1", {})
    idle = store.create("r-2", {})
    for _ in range(3):
        await asyncio.sleep(0.1)
        assert store.get(kept.session_id) is kept
    assert store.get(idle.session_id) is None
    assert store.expired == 1
    assert store.pop(kept.session_id) is kept
    assert store.get(kept.session_id) is None


async def test_sweep_drops_expired_sessions_without_a_get():
    store: SessionStore[dict] = SessionStore(ttl_s=0.05)
    for index in range(10):
        store.create(str(index), {})
    await asyncio.sleep(0.08)
    assert store.sweep() == 10
    assert len(store) == 0


async def test_background_sweeper_runs_and_stops():
    store: SessionStore[dict] = SessionStore(ttl_s=0.01)
    store.start_sweeper()
    store.create("x", {})
    await asyncio.sleep(1.2)  # the sweeper's interval is at least 1 s
    assert len(store) == 0
    await store.stop_sweeper()
