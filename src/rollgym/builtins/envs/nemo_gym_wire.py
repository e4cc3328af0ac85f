"""One NeMo Gym resource-server session over HTTP: the protocol rollgym's ``nemo_gym`` speaks.

A NeMo Gym resource server (``nemo_gym.base_resources_server.SimpleResourcesServer``) is a
FastAPI app whose agents (NeMo Gym's ``simple_agent``) talk to it like this, one rollout::

    POST /seed_session   <the dataset row>                 -> {} + Set-Cookie (the session)
    POST /<tool name>    <the tool call's arguments>       -> the tool's output (any JSON)
    POST /verify         <the row> + {"response": <the model's Responses API answer>}
                                                           -> <the row> + {"reward": r, ...}
    POST /close_session  {"resources_session_id", "episode_id"}   (the server's own state, freed)

The session is the cookie: Starlette's signed session cookie, set by the server's session
middleware on the first answer and sent back on every later request of the rollout (a server
keys its per-rollout state by ``request.session["session_id"]``). ``/close_session`` is the
one way the protocol offers to end a session; servers that keep nothing answer it with a
no-op, and there is no expiry. Every failure is a :class:`NemoGymError`: one line naming the
protocol step (seed_session, the tool's name, verify, close_session) and what went wrong.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import aiohttp
import orjson

from rollgym.builtins.envs.foreign_wire import ForeignError, bounded_exchange, quoted

#: How long closing a session may wait for the server.
CLOSE_TIMEOUT_S = 5.0
#: The most of an off-protocol answer quoted in an error line.
_QUOTED = 120


class NemoGymError(ForeignError):
    """A resource-server exchange failed at ``step`` (``status``: what rollgym answers)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A resource server's answer: its status and its body as text."""

    status: int
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _quoted(text: str) -> str:
    return quoted(text, _QUOTED)


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, owned in a dict
class ResourcesSession:
    """One rollout's session on a resource server: its cookies, carried request to request."""

    http: aiohttp.ClientSession
    base_url: str
    answer_timeout_s: float
    cookies: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    async def exchange(self, step: str, path: str, body: object) -> Answer:
        """POST ``body`` to ``path`` with the session's cookies; keep the cookies answered."""
        headers = {"Content-Type": "application/json"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        async with (
            bounded_exchange(NemoGymError, step, f"POST {path}", self.answer_timeout_s),
            self.http.post(
                self.base_url + path, data=orjson.dumps(body), headers=headers
            ) as response,
        ):
            text = (await response.read()).decode("utf-8", "replace")
            for value in response.headers.getall("Set-Cookie", []):
                jar: SimpleCookie = SimpleCookie()
                jar.load(value)
                self.cookies.update({k: m.value for k, m in jar.items()})
            return Answer(response.status, text)

    async def seed(self, row: dict[str, Any]) -> None:
        answer = await self.exchange("seed_session", "/seed_session", row)
        if not answer.ok:
            raise NemoGymError(
                "seed_session", f"answered HTTP {answer.status}: {_quoted(answer.text)}"
            )
        if not self.cookies:
            raise NemoGymError(
                "seed_session",
                "answered off-protocol: no session cookie (not a NeMo Gym resource server?)",
            )

    async def call(self, tool: str, arguments: dict[str, Any]) -> Answer:
        """One tool call. Any answer is the tool's output, as NeMo Gym's agents take it."""
        return await self.exchange(tool, "/" + tool, arguments)

    async def verify(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.exchange("verify", "/verify", body)
        if not answer.ok:
            raise NemoGymError("verify", f"answered HTTP {answer.status}: {_quoted(answer.text)}")
        try:
            verdict = orjson.loads(answer.text)
        except orjson.JSONDecodeError:
            verdict = None
        if not isinstance(verdict, dict) or "reward" not in verdict:
            raise NemoGymError(
                "verify", f"answered off-protocol (no 'reward'): {_quoted(answer.text)}"
            )
        return verdict

    async def close(self, session_id: str) -> bool | None:
        """``/close_session`` with the session's cookie; whether the server took it (None:
        never seeded, nothing to close). Never raises: a close that fails leaves the session
        to the server's own end."""
        if self.closed:
            return True
        self.closed = True
        if not self.cookies:  # never seeded: the server holds no session of it
            return None
        # One closed before rollgym named it (mid-seed) is named here: the protocol wants an
        # id, the server finds the session by its cookie.
        session_id = session_id or uuid.uuid4().hex
        body = {"resources_session_id": session_id, "episode_id": {"rollout_id": session_id}}
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                answer = await self.exchange("close_session", "/close_session", body)
        except (NemoGymError, TimeoutError):
            return False
        return answer.ok
