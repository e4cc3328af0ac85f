"""An environment session used in-process, by the environment's own episode ``/run``.

It calls the same operations the HTTP routes call (so tool and verify spans, aggregates and
session expiry are identical) and turns their HTTP refusals into the same
:class:`~rollgym.servers.rollout_context.ServerCallError` an agent gets over HTTP, so the
shared episode loop cannot tell the two apart.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from rollgym.errors import HTTPError
from rollgym.servers.rollout_context import SEED_SESSION, SessionBase
from rollgym.servers.tools import ToolAnswer, shown_name

T = TypeVar("T")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Sessions(Protocol):
    def pop(self, session_id: str) -> object: ...


class SessionHost(Protocol):
    """The environment operations a local session calls (``Environment`` has them): the
    same ones its HTTP routes call. A Protocol, so this module never imports the
    environment that imports it."""

    @property
    def context(self) -> _Named: ...

    @property
    def sessions(self) -> _Sessions: ...

    async def open_session(
        self, rollout_id: str | None, task: dict[str, Any]
    ) -> dict[str, object]: ...

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str: ...

    async def call_model_tool(
        self, session_id: str, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer: ...

    async def finish(self, session_id: str, answer: str | None) -> dict[str, object]: ...


class LocalEnvSession(SessionBase):
    """An :class:`~rollgym.servers.rollout_context.EnvSession` on this process's environment."""

    def __init__(self, env: SessionHost, rollout_id: str | None) -> None:
        super().__init__()
        self._env = env
        self._rollout_id = rollout_id

    async def _call(self, what: str, work: Awaitable[T]) -> T:
        try:
            return await work
        except HTTPError as exc:
            message = (
                f"{what} on environment {self._env.context.name!r} refused "
                f"(HTTP {exc.status}): {exc.message}"
            )
            raise self._refused(message, what, exc.status, exc.field) from None

    async def seed(self, task: dict[str, Any]) -> dict[str, Any]:
        seeded = await self._call(SEED_SESSION, self._env.open_session(self._rollout_id, task))
        session_id = seeded["session_id"]
        if isinstance(session_id, str):  # always: the environment names it
            self.session_id = session_id
        return seeded

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        return await self._call(
            f"tool {name!r}", self._env.run_tool(self._session(), name, arguments)
        )

    async def call_model_tool(
        self, name: str, arguments: object, call_id: str | None = None
    ) -> ToolAnswer:
        return await self._call(
            f"tool {shown_name(name)}",
            self._env.call_model_tool(self._session(), name, arguments, call_id),
        )

    async def verify(self, answer: str | None) -> dict[str, Any]:
        return await self._call("verify", self._env.finish(self._session(), answer))

    def close(self) -> None:
        """Drop the session if the episode ended without verifying (no wait for the TTL)."""
        if self.session_id is not None:
            self._env.sessions.pop(self.session_id)
