"""A leaner request/response cycle on uvicorn's httptools protocol: the same HTTP, less CPU.

uvicorn's :class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` costs a rollgym
server more CPU per request than the app it serves (``bench/server_cpu.py``; the profile in
docs/benchmarks.md). Most of it is in how each request/response cycle is carried, not in
parsing: every answer went out in two ``transport.write`` calls (the head, then the body),
so two ``send`` system calls and two TCP segments for the client to read; each cycle made an
``asyncio.Event`` that ``receive`` waited on even when the body had long arrived; and the
response head was rebuilt header by header, the server's own ``date`` and ``server``
headers included, with two regular expressions per header.

:class:`LeanHttpToolsProtocol` keeps uvicorn's connection handling as it is (its parser,
the 400 answer to a malformed request, keep-alive and its timer, pipelining order, flow
control, ``limit_concurrency``, graceful shutdown, which :class:`uvicorn.Server` drives as
before) and rollgym's read deadline (the rule of :mod:`rollgym.http.bounded_reads`), which
now shares one timer with the keep-alive (:mod:`rollgym.http.connection_deadline`); it
replaces the cycle (:class:`LeanCycle`), which now

- writes a response whose head declares its ``Content-Length`` (every non-streamed answer)
  in one ``transport.write``, head and body together; a streamed answer's head still goes
  out at once, so a client sees the status before the first chunk;
- hands ``receive`` the body without waiting when it has already arrived (a future is made
  only when it must wait), and the body bytes as they came (no copy for a one-piece body);
- renders the server's default headers once per value (uvicorn replaces that list once a
  second, for the date) and checks header names it has seen once.

What an app sees and what a client receives are uvicorn's: the same ASGI messages, the same
status line, header order and casing, ``connection: close`` and chunked framing rules, the
same errors for a malformed response (``RuntimeError`` from ``send``), and the same 500 when
an app raises before it answers. ``ROLLGYM_HTTP_SERVER=uvicorn`` serves with uvicorn's own
cycle instead (:func:`rollgym.http.bounded_reads.bounded_protocol`), for comparing the two
side by side (``python bench/server_cpu.py --against ROLLGYM_HTTP_SERVER=uvicorn``).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import httptools
from uvicorn._types import ASGI3Application
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl, service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from rollgym.http import REQUEST_READ_TIMEOUT_S
from rollgym.http.connection_deadline import IDLE, READING, ConnectionDeadline
from rollgym.http.disconnect import CancelOnDisconnect

#: Header names (as the app gave them) already checked against HEADER_RE, and their lower
#: case: an app names the same few headers in every answer.
_CHECKED_NAMES: dict[bytes, bytes] = {}
#: A bound on that cache, so an app that invents header names cannot grow it without end.
_MAX_CHECKED_NAMES = 256
#: Names whose value changes how the response is framed or whether the connection stays.
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_DISCONNECT: dict[str, Any] = {"type": "http.disconnect"}


def _lower_checked(name: bytes) -> bytes:
    """``name`` in lower case, once it passed uvicorn's header-name check (RuntimeError if not)."""
    lowered = _CHECKED_NAMES.get(name)
    if lowered is None:
        if HEADER_RE.search(name):
            raise RuntimeError("Invalid HTTP header name.")
        lowered = name.lower()
        if len(_CHECKED_NAMES) < _MAX_CHECKED_NAMES:
            _CHECKED_NAMES[name] = lowered
    return lowered


class _DefaultHeaders:
    """The server's default headers (``date``, ``server``) rendered once per list.

    uvicorn's main loop replaces ``server_state.default_headers`` with a new list once a second;
    while the list is the same object, its rendering is too. A list holding a framing header
    (``--header connection:close``, say) is not rendered ahead: :meth:`LeanCycle.send` then
    reads it header by header, as uvicorn does.
    """

    __slots__ = ("rendered", "source")

    def __init__(self) -> None:
        self.source: list[tuple[bytes, bytes]] | None = None
        self.rendered: bytes | None = None

    def render(self, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        if headers is not self.source:
            parts: list[bytes] = []
            rendered: bytes | None = None
            try:
                for name, value in headers:
                    lowered = _lower_checked(name)
                    if HEADER_VALUE_RE.search(value) or lowered in _FRAMING:
                        break
                    parts += (lowered, b": ", value, b"\r\n")
                else:
                    rendered = b"".join(parts)
            except RuntimeError:
                rendered = None  # the slow path raises it again, in uvicorn's order
            self.source, self.rendered = headers, rendered
        return self.rendered


class LeanHttpToolsProtocol(CancelOnDisconnect, HttpToolsProtocol):
    """uvicorn's httptools protocol serving each request through a :class:`LeanCycle`, its read
    deadline and keep-alive on one timer (:class:`ConnectionDeadline`), and the handler of a
    request whose connection is lost cancelled (:class:`CancelOnDisconnect`). Pass it as
    ``uvicorn.Config(http=...)``; ``read_timeout_s`` is a class attribute so a test can
    shorten it in a subclass."""

    read_timeout_s: float = REQUEST_READ_TIMEOUT_S
    cycle: LeanCycle  # type: ignore[assignment]
    deadline: ConnectionDeadline

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._defaults = _DefaultHeaders()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.deadline = ConnectionDeadline(
            self.loop, transport, self.client, self.read_timeout_s, self.timeout_keep_alive
        )
        self.deadline.reading()  # a silent connection is a slow request too

    def connection_lost(self, exc: Exception | None) -> None:
        # uvicorn's, less its cycle's Event (the lean cycle is woken instead) and its timer.
        self.deadline.close()
        self.connections.discard(self)
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection lost", prefix)
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.wake()
        if self.flow is not None:
            self.flow.resume_writing()
        if exc is None:
            self.transport.close()
        self.parser = None  # type: ignore[assignment]
        self.cancel_abandoned()

    def _unset_keepalive_if_required(self) -> None:
        # Data arrived (uvicorn calls this first thing in data_received): not idle any more.
        if self.deadline.why == IDLE:
            self.deadline.clear()

    def handle_websocket_upgrade(self) -> None:
        self.deadline.close()  # the connection is the WebSocket protocol's from here
        super().handle_websocket_upgrade()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.deadline.why != READING:
            self.deadline.reading()

    def on_headers_complete(self) -> None:
        parser = self.parser
        http_version = parser.get_http_version()
        scope = self.scope
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        url = self.url
        if url[:1] == b"/" and b"?" not in url and b"%" not in url and b"#" not in url:
            raw_path, query = url, b""  # origin form, no query: what parse_url would give
        else:
            parsed_url = httptools.parse_url(url)
            raw_path, query = parsed_url.path, parsed_url.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root_path = self.root_path
        if root_path:
            scope["path"] = root_path + path
            scope["raw_path"] = root_path.encode("ascii") + raw_path
        else:
            scope["path"] = path
            scope["raw_path"] = raw_path
        scope["query_string"] = query

        limit = self.limit_concurrency
        app: ASGI3Application
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app

        existing = self.cycle
        self.cycle = LeanCycle(
            self,
            scope,
            self.expect_100_continue,
            http_version != "1.0" and parser.should_keep_alive(),
        )
        if existing is None or existing.response_complete:
            self._start_asgi_task(self.cycle, app)  # type: ignore[arg-type]
        else:
            # Pipelined: queued until the answer before it is complete (uvicorn's order).
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))  # type: ignore[arg-type]

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return
        cycle.chunks.append(body)
        cycle.size += len(body)
        if cycle.size > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.wake()

    def on_message_complete(self) -> None:
        self.deadline.clear()  # the request is whole: the handler's time is not the client's
        cycle = self.cycle
        if cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return
        cycle.more_body = False
        cycle.wake()

    def on_response_complete(self) -> None:
        # uvicorn's, with the keep-alive as a deadline; one for a next request already being
        # read (pipelined, not yet whole) stays: that request's time has begun.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self.deadline.why != READING:
            self.deadline.idle()


class LeanCycle:
    """One request and its response: uvicorn's ``RequestResponseCycle`` with the same ASGI
    behaviour and fewer objects and writes (see the module's docstring)."""

    __slots__ = (
        "chunked_encoding",
        "chunks",
        "disconnected",
        "expected_content_length",
        "flow",
        "head",
        "keep_alive",
        "more_body",
        "notify",
        "pending",
        "protocol",
        "response_complete",
        "response_started",
        "scope",
        "size",
        "transport",
        "waiter",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        protocol: LeanHttpToolsProtocol,
        scope: Any,
        expect_100_continue: bool,
        keep_alive: bool,
    ) -> None:
        self.protocol = protocol
        self.scope = scope
        self.transport: asyncio.Transport = protocol.transport
        self.flow: FlowControl = protocol.flow
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        # The request body as it arrived, not yet received by the app.
        self.chunks: list[bytes] = []
        self.size = 0
        self.more_body = True
        # uvicorn's Event, as a flag: set when something arrived that receive() should see;
        # a future only while receive() waits for it.
        self.pending = False
        self.waiter: asyncio.Future[None] | None = None
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0
        self.head: bytes | None = None  # a response head held to go out with its body
        self.notify = True  # tell the protocol when the response is complete (until run ends)

    def wake(self) -> None:
        """Something arrived for ``receive`` (body, its end, a disconnect, the answer's end)."""
        self.pending = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run_asgi(self, app: ASGI3Application) -> None:
        """uvicorn's exception wrapper around the app, with its log lines and its 500."""
        logger = self.protocol.logger
        try:
            result = await app(self.scope, self.receive, self.send)  # type: ignore[func-returns-value]
        except BaseException as exc:
            logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self._close()
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned '%s'.", result)
                self._close()
            elif not self.response_started and not self.disconnected:
                logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                logger.error("ASGI callable returned without completing response.")
                self._close()
        finally:
            self.notify = False  # as uvicorn: an answer completed later starts no pipelined one

    def _close(self) -> None:
        """Close an answer cut short, its head sent first if it was held (as uvicorn's was)."""
        head = self.head
        if head is not None and not self.transport.is_closing():
            self.head = None
            self.transport.write(head)
        self.transport.close()

    async def send_500_response(self) -> None:
        await self.send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"21"),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send(
            {"type": "http.response.body", "body": b"Internal Server Error", "more_body": False}
        )

    async def receive(self) -> Any:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            if not self.pending:
                waiter = self.waiter = asyncio.get_running_loop().create_future()
                try:
                    await waiter
                finally:
                    self.waiter = None
            self.pending = False
        if self.disconnected or self.response_complete:
            return _DISCONNECT
        chunks = self.chunks
        if not chunks:
            body = b""
        elif len(chunks) == 1:
            body = chunks[0]
            chunks.clear()
        else:
            body = b"".join(chunks)
            chunks.clear()
        self.size = 0
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Any) -> None:
        flow = self.flow
        if flow.write_paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self._start(message)
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, "
                "after response already completed."
            )

    def _start(self, message: Any) -> None:
        """The response head, as uvicorn writes it; held when a body of known length follows."""
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        protocol = self.protocol
        scope = self.scope
        if protocol.access_log:
            protocol.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),
                scope["method"],
                get_path_with_query_string(scope),
                scope["http_version"],
                status_code,
            )
        content = [STATUS_LINE[status_code]]
        defaults = protocol.server_state.default_headers
        rendered = protocol._defaults.render(defaults)
        if rendered is None:
            headers = defaults + list(message.get("headers", []))
        else:
            content.append(rendered)
            headers = message.get("headers", ())
        has_connection_close = False
        for name, value in headers:
            name = _lower_checked(name)
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            if name in _FRAMING:
                if name == b"content-length":
                    if self.chunked_encoding is None:
                        self.expected_content_length = int(value.decode())
                        self.chunked_encoding = False
                elif name == b"transfer-encoding":
                    if value.lower() == b"chunked":
                        self.expected_content_length = 0
                        self.chunked_encoding = True
                elif b"close" in [token.lower().strip() for token in value.split(b",")]:
                    self.keep_alive = False
                    has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and scope["method"] != "HEAD"
            and status_code not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        head = b"".join(content)
        if self.chunked_encoding is False:
            self.head = head  # goes out with the body, in one write
        else:
            self.transport.write(head)  # streamed (or bodiless): the client sees it at once

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            data = b""
        elif self.chunked_encoding:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            data = body
        head = self.head
        if head is not None:
            self.head = None
            data = head + data
        if data:
            self.transport.write(data)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.wake()
            if not self.keep_alive:
                self.transport.close()
            if self.notify:
                self.protocol.on_response_complete()
