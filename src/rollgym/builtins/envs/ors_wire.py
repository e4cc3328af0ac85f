"""One ORS (OpenReward) session over HTTP: the protocol rollgym's ``ors`` speaks.

An ORS environment server (``openreward.environments.Server``) is a FastAPI app; openreward's
own client (``openreward.api.environments.client.AsyncSession``) plays one session like this,
and so does this module, request for request::

    POST /create_session        (SSE)                   -> event task_id: <sid>, event end
    POST /create                X-Session-ID: <sid>
         {"env_name", "split", "index"} or {"env_name", "task_spec"}   (the task; runs setup())
    GET  /<env>/task_tools      X-Session-ID            -> {"tools": [...], "terminal_tool"}
    GET  /<env>/prompt          X-Session-ID            -> [{"type": "text", "text"}, ...]
    POST /<env>/call            X-Session-ID  (SSE)  {"name", "input"}
                                -> event task_id, then event end: {"ok": true, "output":
                                   {"blocks", "metadata", "reward", "finished"}}
                                   or {"ok": false, "error", "reason"}; event error: it raised
    POST /delete                X-Session-ID            (the environment's teardown())
    POST /delete_session        X-Session-ID

A session lives on the server until ``/delete`` (or its own reaper, after 15 minutes without
a request). Every failure is an :class:`OrsError`: one line naming the protocol step
(create_session, create, task_tools, prompt, the tool's name, delete) and what went wrong.
What openreward's client adds for its cloud (API keys, secrets, retries through a proxy,
resuming a call by its task id, a keep-alive ping every 10 s) is not needed on loopback and
not sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from rollgym.builtins.envs.foreign_wire import ForeignError, bounded_exchange, quoted

#: How long closing a session may wait for the server.
CLOSE_TIMEOUT_S = 10.0


class OrsError(ForeignError):
    """An ORS exchange failed at ``step`` (``status``: what rollgym answers for it)."""

    def __init__(
        self, step: str, message: str, *, status: int = 502, answered: int | None = None
    ) -> None:
        super().__init__(step, message, status=status)
        #: The HTTP status the server answered, where it answered one.
        self.answered = answered


@dataclass(frozen=True, slots=True)
class CallResult:
    """A ``/call`` answer: the tool's output (``ok``), or its refusal (``error``, ``reason``)."""

    ok: bool
    text: str
    reward: float | None = None
    finished: bool = False
    reason: str | None = None


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, kept in sets
class OrsSession:
    """One rollout's session on an ORS server (its id is the ``X-Session-ID`` header)."""

    http: aiohttp.ClientSession
    base_url: str
    env_name: str
    answer_timeout_s: float
    sid: str | None = None
    created: bool = False
    closed: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    terminal: dict[str, Any] | None = None

    # --- the exchanges ------------------------------------------------------------------------

    def _headers(self, sse: bool = False) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if sse:
            headers["Accept"] = "text/event-stream"
        if self.sid is not None:
            headers["X-Session-ID"] = self.sid
        return headers

    async def _json(self, step: str, method: str, path: str, body: object = None) -> Any:
        """One plain request; its JSON answer."""
        data = None if body is None else orjson.dumps(body)
        async with (
            bounded_exchange(OrsError, step, f"{method} {path}", self.answer_timeout_s),
            self.http.request(
                method, self.base_url + path, data=data, headers=self._headers()
            ) as response,
        ):
            text = (await response.read()).decode("utf-8", "replace")
            if response.status >= 400:
                raise _refused(step, response.status, text)
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            raise OrsError(step, f"answered off-protocol (not JSON): {quoted(text)}") from None

    async def _sse(self, step: str, path: str, body: object) -> tuple[str | None, str]:
        """One SSE request as openreward's client reads it (``resumable_sse``): the
        ``task_id`` event's data and the ``chunk``...``end`` events' data joined."""
        task_id: str | None = None
        chunks: list[str] = []
        async with (
            bounded_exchange(OrsError, step, f"POST {path}", self.answer_timeout_s),
            self.http.post(
                self.base_url + path, data=orjson.dumps(body), headers=self._headers(True)
            ) as response,
        ):
            if response.status >= 400:
                text = (await response.read()).decode("utf-8", "replace")
                raise _refused(step, response.status, text)
            if not response.content_type.startswith("text/event-stream"):
                text = (await response.read()).decode("utf-8", "replace")
                raise OrsError(
                    step,
                    f"answered off-protocol: {response.content_type} "
                    f"{quoted(text)!r}, not an event stream",
                )
            async for event, data in _events(response.content):
                if event == "task_id":
                    task_id = data.strip()
                elif event == "chunk":
                    chunks.append(data)
                elif event == "end":
                    chunks.append(data)
                    return task_id, "".join(chunks)
                elif event == "error":
                    raise OrsError(step, f"raised: {quoted(data) or 'an unknown error'}")
        raise OrsError(step, "answered off-protocol: the event stream ended without an 'end' event")

    # --- one session --------------------------------------------------------------------------

    async def open(self, task: dict[str, Any]) -> None:
        """``/create_session`` then ``/create`` with the task: the session made."""
        task_id, _ = await self._sse("create_session", "/create_session", {})
        if not task_id:
            raise OrsError("create_session", "answered off-protocol: no session id (task_id)")
        self.sid = task_id
        body = {"env_name": self.env_name, **task}
        answer = await self._json("create", "POST", "/create", body)
        if not isinstance(answer, dict) or answer.get("sid") != self.sid:
            raise OrsError("create", f"answered off-protocol: {quoted(str(answer))}")
        self.created = True

    async def read_tools(self) -> None:
        """The session's tools (``task_tools``), and its terminal tool if it has one."""
        listed = await self._json("task_tools", "GET", f"/{self.env_name}/task_tools")
        tools = listed.get("tools") if isinstance(listed, dict) else None
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            raise OrsError("task_tools", f"answered off-protocol: {quoted(str(listed))}")
        self.tools = tools
        terminal = listed.get("terminal_tool")
        self.terminal = terminal if isinstance(terminal, dict) and terminal.get("name") else None

    async def prompt(self) -> str:
        """The task's prompt (its text blocks; an image block is named, not shown)."""
        blocks = await self._json("prompt", "GET", f"/{self.env_name}/prompt")
        if not isinstance(blocks, list):
            raise OrsError(
                "prompt", f"answered off-protocol (not a list of blocks): {blocks!r:.120}"
            )
        return blocks_text("prompt", blocks)

    async def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """One tool call (``/call``): the tool's output, or the server's refusal of it."""
        _, text = await self._sse(
            name, f"/{self.env_name}/call", {"name": name, "input": arguments}
        )
        try:
            answer = orjson.loads(text)
        except orjson.JSONDecodeError:
            answer = None
        if isinstance(answer, dict) and answer.get("ok") is False:
            return CallResult(False, str(answer.get("error")), reason=answer.get("reason"))
        output = answer.get("output") if isinstance(answer, dict) else None
        if not isinstance(output, dict) or not isinstance(output.get("blocks"), list):
            raise OrsError(name, f"answered off-protocol (no tool output): {quoted(text)}")
        reward = output.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
            raise OrsError(name, f"answered off-protocol: a non-numeric reward {reward!r:.60}")
        return CallResult(
            True,
            blocks_text(name, output["blocks"]),
            None if reward is None else float(reward),
            output.get("finished") is True,
        )

    async def close(self) -> bool | None:
        """``/delete`` (the environment's teardown) then ``/delete_session``, as openreward's
        client ends a session; whether the server took it (None: no session was begun, nothing
        to close). Never raises: a close that fails leaves the session to the server's reaper.
        (The environment calls it once the session's creation has ended, so ``/delete`` never
        overtakes the ``/create`` it undoes.)"""
        if self.closed:
            return True
        self.closed = True
        if self.sid is None:
            return None
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                # also when /create did not answer: it may have made the environment all the
                # same (the server answers /delete of an unknown session too)
                await self._json("delete", "POST", "/delete")
                await self._json("delete_session", "POST", "/delete_session")
        except (OrsError, TimeoutError):
            return False
        return True


def blocks_text(step: str, blocks: list[Any]) -> str:
    """What the model reads of ORS blocks: the text blocks, an image block named."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            raise OrsError(
                step, f"answered off-protocol: a block that is not an object {block!r:.60}"
            )
        if block.get("type") == "image":
            parts.append(f"[image: {block.get('mimeType', 'unknown type')}]")
        elif isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            raise OrsError(
                step, f"answered off-protocol: a block without text {quoted(str(block))}"
            )
    return "\n".join(parts)


def _refused(step: str, status: int, text: str) -> OrsError:
    """An HTTP error answer (``status`` >= 400) as the step's failure."""
    return OrsError(step, f"answered HTTP {status}: {_detail(text)}", answered=status)


def _detail(text: str) -> str:
    """FastAPI's ``{"detail": ...}``, else the text: one line."""
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return quoted(text)
    detail = body.get("detail") if isinstance(body, dict) else None
    return quoted(detail if isinstance(detail, str) else str(body))


async def _events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events as openreward's client parses them (``_parse_sse_events``):
    ``event:`` and ``data:`` fields, an empty line ends one, ``:`` lines are comments."""
    event: str | None = None
    data: list[str] = []
    async for raw in content:
        line = raw.decode("utf-8", "ignore").rstrip("\r\n")
        if not line:
            if event:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":") or ":" not in line:
            continue
        name, value = line.split(":", 1)
        if name == "event":
            event = value.lstrip()
        elif name == "data":
            data.append(value.lstrip())
