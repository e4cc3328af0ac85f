"""Environment sessions with a time to live, so an agent that dies mid-rollout leaks nothing.

Each session holds the environment's state for one rollout plus the rollout id it was seeded
with (spans of its tool calls and its verification carry that id). Every use refreshes the
expiry; a background sweep, started at server start-up (outside any request), drops the ones
nobody touched for ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from rollgym.event_loop import cancel_and_wait

State = TypeVar("State")


@dataclass(slots=True)
class Session(Generic[State]):
    session_id: str
    rollout_id: str | None
    state: State
    expires_at: float


class SessionStore(Generic[State]):
    """Sessions by id; ``ttl_s`` after their last use they are swept."""

    def __init__(self, ttl_s: float, on_expire: Callable[[State], None] | None = None) -> None:
        self.ttl_s = ttl_s
        #: Called with the state of each session dropped for expiry (to free what it held).
        self._on_expire = on_expire
        self._sessions: dict[str, Session[State]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, rollout_id: str | None, state: State) -> Session[State]:
        session = Session(uuid.uuid4().hex, rollout_id, state, time.monotonic() + self.ttl_s)
        self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session[State] | None:
        """The live session, its expiry refreshed; None when unknown or expired."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if session.expires_at <= now:
            del self._sessions[session_id]
            self.expired += 1
            self._expired(session)
            return None
        session.expires_at = now + self.ttl_s
        return session

    def pop(self, session_id: str) -> Session[State] | None:
        """End a session (after verification); None when unknown or expired."""
        session = self.get(session_id)
        if session is not None:
            del self._sessions[session_id]
        return session

    def sweep(self) -> int:
        """Drop expired sessions now; return how many."""
        now = time.monotonic()
        dead = [sid for sid, session in self._sessions.items() if session.expires_at <= now]
        for sid in dead:
            self._expired(self._sessions.pop(sid))
        self.expired += len(dead)
        return len(dead)

    def _expired(self, session: Session[State]) -> None:
        if self._on_expire is not None:
            self._on_expire(session.state)

    def start_sweeper(self) -> None:
        """Sweep every ``ttl_s / 4`` (at least 1 s) until :meth:`stop_sweeper`."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def stop_sweeper(self) -> None:
        await cancel_and_wait(self._sweeper)
        self._sweeper = None

    async def _sweep_forever(self) -> None:
        interval = max(1.0, self.ttl_s / 4)
        while True:
            await asyncio.sleep(interval)
            self.sweep()
