"""SessionStore: TTL expiry on use and by the sweeper."""

from __future__ import annotations

import asyncio
import time

from rollgym.servers.sessions import SessionStore


async def test_use_refreshes_and_idle_sessions_expire():
    """A session used more often than its TTL outlives it; an idle one does not.

    The uses come right after each other (0.02 s apart), so only a stall of the whole TTL
    (50 times that) could let the kept session expire on a loaded machine; the idle one is
    looked at only once surely past its TTL."""
    ttl_s = 1.0
    store: SessionStore[dict] = SessionStore(ttl_s=ttl_s)
    past_ttl = time.monotonic() + ttl_s
    kept = store.create("r-1", {})
    idle = store.create("r-2", {})
    uses = 0
    while time.monotonic() <= past_ttl or uses < 2:
        assert store.get(kept.session_id) is kept, f"expired after {uses} uses"
        uses += 1
        await asyncio.sleep(0.02)
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
    # the sweeper's interval is at least 1 s; a loaded machine may run it later: wait for it
    deadline = time.monotonic() + 30
    while len(store) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(store) == 0 and store.expired == 1  # swept, never looked up
    await store.stop_sweeper()
