"""One OpenEnv session over its WebSocket: the protocol rollgym's ``openenv`` environment speaks.

An OpenEnv server (``openenv.core.env_server.http_server``, as ``create_app`` builds it) gives
each WebSocket connection to ``/ws`` an environment instance of its own: the session exists
from the moment the connection is accepted until it closes, whichever way it closes (a
``close`` message, the connection dropped, the client process gone). Its HTTP ``/reset`` and
``/step`` build a fresh instance per call, so a whole episode can only be played over the
WebSocket. The messages::

    -> {"type": "reset", "data": {"seed": 3, "episode_id": "7-0", ...}}
    -> {"type": "step", "data": <the action, as the action class's fields>}
    -> {"type": "close"}
    <- {"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}
    <- {"type": "error", "data": {"message": "...", "code": "VALIDATION_ERROR" | ...}}

Every failure is an :class:`OpenEnvError`: one line naming the protocol step (open session,
reset, step) and what went wrong, never a traceback.
"""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import aiohttp
import orjson

from rollgym.builtins.envs.foreign_wire import ForeignError

#: The error code OpenEnv answers when an action does not fit the action class.
VALIDATION_ERROR = "VALIDATION_ERROR"
#: The error code of a server that holds as many sessions as it allows.
CAPACITY_REACHED = "CAPACITY_REACHED"
#: The error code of an environment whose constructor raised.
FACTORY_ERROR = "FACTORY_ERROR"
#: The protocol step of opening a session (the server creates the environment instance).
OPEN_SESSION = "open session"
#: How long closing a session may wait for the server's side of it.
CLOSE_TIMEOUT_S = 5.0


class OpenEnvError(ForeignError):
    """An OpenEnv session failed at ``step`` (open session, reset, step, list_tools).

    ``status``: what rollgym answers for it (503 also when the server has no session to give:
    refused, at capacity). ``model_mistake`` marks an action that does not fit the action
    class: the model's mistake, told to the model rather than failing the rollout.
    """

    def __init__(
        self, step: str, message: str, *, status: int = 502, model_mistake: bool = False
    ) -> None:
        super().__init__(step, message, status=status)
        self.model_mistake = model_mistake


@dataclass(frozen=True, slots=True)
class Observation:
    """One observation as OpenEnv serializes it: its own fields, the reward, the done flag."""

    fields: dict[str, Any]
    reward: float | None
    done: bool


def ws_url(base_url: str) -> str:
    """The session endpoint of an OpenEnv server given by its HTTP base URL."""
    base = base_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + "/ws"
    return "ws://" + base.removeprefix("http://") + "/ws"


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, owned in a dict
class WireSession:
    """One OpenEnv session (made by :meth:`connect`): one exchange at a time, each bounded by ``answer_timeout_s``.

    A reader task reads the connection all the time, not only while an answer is awaited: the
    server pings its sessions (uvicorn: every 20 s) and drops one whose pings go unanswered,
    and aiohttp answers a ping only while someone reads. Between two steps a session waits a
    whole model turn, which can be minutes.
    """

    http: aiohttp.ClientSession
    #: The session endpoint (:func:`ws_url`).
    url: str
    _: KW_ONLY
    connect_timeout_s: float
    answer_timeout_s: float
    _ws: aiohttp.ClientWebSocketResponse | None = field(default=None, init=False)
    _reader: asyncio.Task[None] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _answers: asyncio.Queue[aiohttp.WSMessage] = field(default_factory=asyncio.Queue, init=False)
    #: Why no exchange can be trusted any more (an answer that never came may come late).
    _broken: str | None = field(default=None, init=False)
    closed: bool = field(default=False, init=False)

    async def connect(self) -> None:
        """Connect to the session endpoint (``ws://host:port/ws``): the server opens a session
        for the connection. One closed while it connected is ended at once."""
        url, timeout_s = self.url, self.connect_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                self._ws = await self.http.ws_connect(url, autoping=True, max_msg_size=0)
        except TimeoutError:
            raise OpenEnvError(
                OPEN_SESSION, f"no session from {url} within {timeout_s:g} s", status=504
            ) from None
        except aiohttp.WSServerHandshakeError as exc:
            raise OpenEnvError(
                OPEN_SESSION, f"{url} refused the WebSocket (HTTP {exc.status})", status=503
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise OpenEnvError(
                OPEN_SESSION, f"cannot reach {url}: {type(exc).__name__}: {exc}", status=503
            ) from None
        self._reader = asyncio.get_running_loop().create_task(self._read(self._ws))
        if self.closed:  # closed while connecting (a shutdown that could wait no longer)
            await self._end(self._ws, self._reader)

    async def reset(self, data: dict[str, Any]) -> Observation:
        return _observation("reset", await self._exchange("reset", {"type": "reset", "data": data}))

    async def step(self, action: dict[str, Any], what: str = "step") -> Observation:
        return _observation(what, await self._exchange(what, {"type": "step", "data": action}))

    async def close(self) -> None:
        """End the session on the server (a ``close`` message, then the connection); never
        raises: a connection already gone has ended the session all the same."""
        if self.closed:
            return
        self.closed = True
        if self._ws is not None and self._reader is not None:  # else no session to end yet
            await self._end(self._ws, self._reader)

    @staticmethod
    async def _end(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.Task[None]) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                if not ws.closed:
                    await ws.send_str('{"type": "close"}')
                    # The server ends the session, then closes the connection: wait for that
                    # (the reader sees it), so it does not close one this side already dropped.
                    await asyncio.shield(reader)
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError):
            pass
        finally:
            reader.cancel()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await ws.close()
            except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError):
                pass

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Every message, in order, until the connection ends (its last message says how)."""
        while True:
            try:
                message = await ws.receive()
            except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                message = aiohttp.WSMessage(aiohttp.WSMsgType.ERROR, exc, None)
            self._answers.put_nowait(message)
            if message.type in _ENDED:
                return

    async def _last_word(self) -> object | None:
        """The ``data`` of an error the server sent before it closed the connection, if it
        did. A server refusing the session (OpenEnv's factory error, its capacity) says so
        and closes at once; on a loaded machine the close can reach the transport before
        this side's first write, which then fails although the reason is already here or on
        its way. The reader hands on what arrived until the end (bounded)."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                while True:
                    message = await self._answers.get()
                    if message.type in _ENDED:
                        return None
                    try:
                        body = orjson.loads(message.data)
                    except (orjson.JSONDecodeError, TypeError):
                        continue
                    if isinstance(body, dict) and body.get("type") == "error":
                        return body.get("data")
        except TimeoutError:
            return None

    async def _exchange(self, step: str, message: dict[str, Any]) -> dict[str, Any]:
        ws = self._ws
        if self.closed or ws is None:
            raise OpenEnvError(step, "the session is closed")
        if self._broken is not None:
            raise OpenEnvError(step, self._broken)
        async with self._lock:
            try:
                async with asyncio.timeout(self.answer_timeout_s):
                    await ws.send_str(orjson.dumps(message).decode())
                    answer = await self._answers.get()
            except TimeoutError:
                self._broken = f"an earlier answer never came ({step})"
                raise OpenEnvError(
                    step, f"no answer within {self.answer_timeout_s:g} s", status=504
                ) from None
            except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                self._broken = f"the connection failed ({step})"
                last_word = await self._last_word()
                if last_word is not None:  # the server said why it closed: that, not the write
                    raise _error(step, last_word) from None
                raise OpenEnvError(step, f"the connection failed: {exc}") from None
        if answer.type in _ENDED:
            self._broken = "the server closed the session"
            raise OpenEnvError(step, self._broken)
        if answer.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            raise OpenEnvError(step, f"the server answered a {answer.type.name} frame")
        try:
            body = orjson.loads(answer.data)
        except orjson.JSONDecodeError:
            raise OpenEnvError(
                step, f"answered something that is not JSON: {_cut(answer.data)}"
            ) from None
        if not isinstance(body, dict):
            raise OpenEnvError(step, f"answered {_cut(answer.data)}, not an object")
        if body.get("type") == "error":
            raise _error(step, body.get("data"))
        return body


#: The messages after which a connection reads nothing more.
_ENDED = frozenset(
    (
        aiohttp.WSMsgType.CLOSE,
        aiohttp.WSMsgType.CLOSED,
        aiohttp.WSMsgType.CLOSING,
        aiohttp.WSMsgType.ERROR,
    )
)


def _observation(step: str, body: dict[str, Any]) -> Observation:
    data = body.get("data")
    if body.get("type") != "observation" or not isinstance(data, dict):
        raise OpenEnvError(
            step, f"answered off-protocol (expected an 'observation' message): {_cut(body)}"
        )
    fields = data.get("observation")
    reward = data.get("reward")
    done = data.get("done", False)
    if not isinstance(fields, dict) or not isinstance(done, bool):
        raise OpenEnvError(step, f"answered an observation off-protocol: {_cut(data)}")
    if isinstance(reward, bool):
        reward = float(reward)  # OpenEnv allows a bool reward: True counts 1.0
    elif reward is not None and not isinstance(reward, int | float):
        raise OpenEnvError(step, f"answered a reward that is not a number: {_cut(reward)}")
    return Observation(fields, None if reward is None else float(reward), done)


def _error(step: str, data: object) -> OpenEnvError:
    details = data if isinstance(data, dict) else {}
    code = details.get("code")
    message = " ".join(str(details.get("message") or _cut(data)).split())
    if code == VALIDATION_ERROR:
        errors = details.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            first = errors[0]
            where = ".".join(str(part) for part in first.get("loc") or ())
            message = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
        return OpenEnvError(
            step, f"the action does not fit: {message}", status=400, model_mistake=True
        )
    if code == FACTORY_ERROR:  # said at once on connecting: no session was opened
        return OpenEnvError(OPEN_SESSION, f"the environment could not be created: {message}")
    if code == CAPACITY_REACHED:
        return OpenEnvError(
            OPEN_SESSION,
            f"the server is at capacity ({details.get('active_sessions')} of "
            f"{details.get('max_sessions')} sessions): raise its max_concurrent_envs",
            status=503,
        )
    return OpenEnvError(step, f"the environment failed ({code}): {message}")


def _cut(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
