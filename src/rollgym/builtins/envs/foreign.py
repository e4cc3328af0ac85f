"""What every environment from another package's protocol shares at start-up.

Such an environment (OpenEnv, a NeMo Gym resource server) is named either by the URL of a
server the user runs or by something rollgym starts itself: exactly one of the two. And before
the first rollout it reads one JSON document from the server (OpenEnv's ``/schema``, FastAPI's
``/openapi.json``) to tell it speaks the protocol at all, so a wrong server is one line then,
not a failure per rollout.

Once started, each rollgym session of such an environment holds one session on the foreign
server (a WebSocket, a cookie): :class:`ForeignSessionsEnvironment` is what keeps those owned
(closed however the episode ends) and what turns the model's tool calls into steps there.
"""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
import orjson

from rollgym.servers import (
    UNKNOWN_TOOL,
    Environment,
    HTTPError,
    RolloutContext,
    ServerContext,
    SessionState,
    SetupProblem,
    ToolAnswer,
    ToolMistake,
    model_arguments,
)


def check_one_place(url: str | None, url_key: str, local: str | None, local_key: str) -> None:
    """Exactly one of ``url`` (a server the user runs) and ``local``; the URL an http(s) one.

    Raises ``ValueError`` (the options' validation error, naming the keys)."""
    if (url is None) == (local is None):
        raise ValueError(f"give exactly one of '{url_key}' (a server you run) or '{local_key}'")
    if url is not None and not re.match(r"^https?://[^/]+", url):
        raise ValueError(f"'{url_key}' must be an http(s) URL, got {url!r}")


def fetch_setup_json(base_url: str, path: str, timeout_s: float, where: str, key: str) -> object:
    """``GET base_url + path`` as JSON, or a :class:`SetupProblem` naming ``where``, the
    request and what went wrong (``key``: the option that named the server)."""
    what = f"{where}: GET {path}"
    try:
        with urllib.request.urlopen(  # noqa: S310 (an http(s) URL, checked by the options)
            base_url + path, timeout=timeout_s
        ) as answer:
            return orjson.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise SetupProblem(key, f"{what} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SetupProblem(key, f"{what} failed: {reason}") from None
    except orjson.JSONDecodeError:
        raise SetupProblem(key, f"{what} answered something not JSON") from None


def refused_over_http(answer: ToolAnswer) -> str:
    """A tool call made over HTTP (``POST /tools/{name}``) has a caller, not a model, to tell
    of a mistake: an unknown tool is its 404, arguments the tool refuses its 400; else the
    tool's output."""
    if answer.error == UNKNOWN_TOOL:
        raise HTTPError(404, answer.output.removeprefix("error: "), field="tool")
    if answer.error is not None:
        raise HTTPError(400, answer.output.removeprefix("error: "), field="arguments")
    return answer.output


class ForeignSession(Protocol):
    """One session on the foreign server, as the environment holds it."""

    @property
    def closed(self) -> bool: ...


Wire = TypeVar("Wire", bound=ForeignSession)


class ForeignFailure(Protocol):
    """What the foreign server's client raises: the HTTP status rollgym answers with."""

    status: int


class ForeignSessionsEnvironment(Environment, Generic[Wire]):
    """An environment each of whose sessions holds one session on a foreign server.

    A subclass's :meth:`seed` puts that session in ``state.data["wire"]`` and the session's
    tools (OpenAI function schemas) in ``state.data["tools"]``/``["tool_names"]``; it writes
    :meth:`close_wire` (how to end one) and :meth:`foreign_step` (one tool call there, the
    arguments already checked). This class keeps the foreign sessions owned: each is closed,
    in a task of its own, when its episode ``/run`` ends however it ends, when its rollgym
    session expires unused and at shutdown. A server rollgym started itself
    (:meth:`stop_local_server`) is stopped at shutdown, after the sessions are closed.
    """

    #: Where the foreign server is, for messages ("OpenEnv server http://...").
    where: str

    def __init__(self, context: ServerContext) -> None:
        super().__init__(context)
        #: The foreign session of each live rollgym session, by session id: what must be closed.
        self._wires: dict[str, Wire] = {}
        self._closing: set[asyncio.Task[object]] = set()
        self._http: aiohttp.ClientSession | None = None

    # --- what a subclass writes -----------------------------------------------------------------

    async def close_wire(self, wire: Wire, session_id: str) -> object:
        """End one foreign session (``session_id``: rollgym's, "" before it has one)."""
        raise NotImplementedError

    async def foreign_step(
        self, state: SessionState, name: str, args: dict[str, Any], call_id: str | None
    ) -> ToolAnswer:
        """One tool call on the session's foreign session (its rollgym id:
        ``state.data["session_id"]``): ``name`` is one of its tools, ``args`` an object."""
        raise NotImplementedError

    def stop_local_server(self) -> None:
        """Stop the server rollgym started for this environment, if any (blocking)."""

    # --- start-up and shutdown ------------------------------------------------------------------

    async def on_startup(self) -> None:
        await super().on_startup()
        # Each session holds a connection of its own for its whole episode: no pool limit.
        # A session's cookie, if it has one, is its own (carried by the session), never shared.
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
        )

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
            for session_id in list(self._wires):
                self.release_wire(session_id)
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
        finally:
            await asyncio.to_thread(self.stop_local_server)

    def http(self) -> aiohttp.ClientSession:
        """The client the foreign sessions use; 503 before start-up."""
        if self._http is None:
            raise HTTPError(503, f"environment {self.context.name!r} is not started")
        return self._http

    # --- sessions -------------------------------------------------------------------------------

    async def open_session(self, rollout_id: str | None, task: dict[str, Any]) -> dict[str, object]:
        """The rollgym session, its foreign session owned from now on, its own tools offered."""
        seeded = await super().open_session(rollout_id, task)
        session_id = str(seeded["session_id"])
        session = self.sessions.get(session_id)
        assert session is not None  # created just now
        session.state.data["session_id"] = session_id
        self._wires[session_id] = session.state.data["wire"]
        seeded["tools"] = session.state.data["tools"]
        return seeded

    def on_session_expired(self, state: SessionState) -> None:
        self.release_wire(state.data["session_id"])

    async def play_episode(self, rollout: RolloutContext, task: dict[str, Any]) -> dict[str, Any]:
        """The shared tool loop; the foreign session closed however the episode ends."""
        try:
            return await super().play_episode(rollout, task)
        finally:
            session_id = getattr(rollout.env, "session_id", None)
            if isinstance(session_id, str):
                self.release_wire(session_id)

    def release_wire(self, session_id: str) -> None:
        """Close the session's foreign session, in a task of its own: a cancelled episode's
        ``finally`` cannot await, and the close must happen all the same."""
        wire = self._wires.pop(session_id, None)
        if wire is None or wire.closed:
            return
        task = asyncio.get_running_loop().create_task(self.close_wire(wire, session_id))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def forget_wire(self, session_id: str) -> None:
        """The session is being verified: its closing is the verifier's now."""
        self._wires.pop(session_id, None)

    # --- tools ----------------------------------------------------------------------------------

    async def run_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        return refused_over_http(await self.call_model_tool(session_id, name, arguments))

    async def answer_tool_call(
        self, state: SessionState, name: str, arguments: object, call_id: str | None
    ) -> ToolAnswer:
        """The model's mistakes (a tool the session does not have, arguments that are not a
        JSON object) told to the model; anything else is a step on the foreign session."""
        tools: frozenset[str] = state.data["tool_names"]
        try:
            if name not in tools:
                raise ToolMistake(
                    UNKNOWN_TOOL, f"unknown tool {name[:64]!r}; tools: {sorted(tools)}"
                )
            args = model_arguments(name, arguments)
        except ToolMistake as mistake:
            self.aggregates.record_mistake()
            return mistake.answer()
        return await self.foreign_step(state, name, args, call_id)

    def failed(self, exc: ForeignFailure) -> HTTPError:
        """The foreign server's failure as this environment's HTTP error, naming both."""
        return HTTPError(exc.status, f"environment {self.context.name!r} ({self.where}): {exc}")
