"""A lean HTTP/1.1 exchange on plain ``http://``: asyncio transports, httptools' parser, a pool.

Why: every rollout is four JSON exchanges, and aiohttp's ``ClientSession.request`` builds per
call a request object, a response object, multidicts, yarl URLs, timer contexts, tracing
signals and a cookie filter. Profiled, that machinery was the largest single item of the
agent's CPU. rollgym's calls need much less: one POST (or GET) with a JSON body, the whole
answer read within a size limit, keep-alive. This module does exactly that, with the same
parser the servers use (httptools), and nothing per request it can build once.

What it does not do, so the client's chooser (:mod:`rollgym.http.chooser`) sends those
through aiohttp: TLS (``https://``), credentials in the URL (basic auth), streamed answers
(SSE). It sends no ``Accept-Encoding``; a server that compresses anyway (``gzip``,
``deflate``) is inflated within the same byte limit (the limit bounds what a body inflates
to, never only its compressed length), and any other coding is a :class:`BadAnswer`.

Errors are this module's own (:class:`LeanError` and its children) and carry what the client
needs to translate them (was the connection refused? had the answer started? was the
connection a pooled one?); its transport (:mod:`rollgym.http.lean_transport`) turns them into
the seam's, which the client turns into rollgym's transport errors at its one boundary.
Time limits are the caller's: a ``deadline`` (the loop's clock) given to
:meth:`LeanPool.exchange`, or ``asyncio.timeout`` around it. Either way a connection that is
cancelled or timed out mid-exchange is closed, never pooled again, and the exchange raises
``TimeoutError``. The deadline is the cheap way for the common case (a pooled connection, a
free slot): one timer on the loop for the answer, where ``asyncio.timeout`` costs a context
manager, a timer and a task cancellation (profiled: the costliest Python item of an agent's
client calls); a wait for a slot or a new connection still runs under ``asyncio.timeout_at``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import time
import zlib
from collections.abc import Callable, Mapping
from typing import NamedTuple, cast
from urllib.parse import quote, urlsplit

import httptools

from rollgym.environment_variables import ROLLGYM_HTTP_CLIENT
from rollgym.http.transport import Answer as Answer
from rollgym.http.transport import AnswerTooLarge as AnswerTooLarge
from rollgym.http.transport import Headers as Headers
from rollgym.url_origin import split_origin

ENV_CLIENT = ROLLGYM_HTTP_CLIENT
# Answer, AnswerTooLarge and Headers are the seam's (every transport's), named here as before.


def enabled() -> bool:
    """Whether a client opened now sends plain ``http://`` exchanges through this module."""
    return os.environ.get(ENV_CLIENT, "") != "aiohttp"


class LeanError(Exception):
    """An exchange that failed below HTTP (connect, disconnect, an unparsable answer)."""


class CannotConnect(LeanError):
    """The TCP connection could not be made; ``os_error`` says why."""

    def __init__(self, address: str, os_error: OSError) -> None:
        super().__init__(f"cannot connect to {address}: {os_error}")
        self.os_error = os_error


class ServerDisconnected(LeanError):
    """The connection closed before the whole answer arrived.

    ``reused``: it was a pooled connection; ``answer_started``: a byte of the answer came.
    A reused connection that closed before any answer is the keep-alive race (the server
    closed it idle as the request went out): the only case that is safe to send again.
    """

    def __init__(self, message: str, *, reused: bool, answer_started: bool) -> None:
        super().__init__(message)
        self.reused = reused
        self.answer_started = answer_started


class BadAnswer(LeanError):
    """The answer was not valid HTTP/1.1."""


#: ``dict.get`` unbound: a lookup by a name known to be lower-case, past :meth:`Headers.get`.
_dict_get = dict.get


class Target(NamedTuple):
    """Where a URL's request goes: the pool key and the request line's parts."""

    host: str
    port: int
    #: The ``Host`` header's value (``netloc``: the host, and the port when the URL names it).
    authority: str
    #: The request target: path and query.
    path: str


#: What may stand in a request target as it is (RFC 3986: unreserved, sub-delims, ``:@/?``,
#: and ``%`` of an escape already made); anything else (a space, non-ASCII) is percent-encoded.
_TARGET_SAFE = "!$&'()*+,;=:@/?%"
#: ``quote`` keeps letters, digits and ``-._~`` whatever ``safe`` says: those plus the above.
_NEEDS_QUOTING = re.compile(f"[^A-Za-z0-9{re.escape('-._~' + _TARGET_SAFE)}]")


def _request_target(path: str) -> str:
    """``path`` as a request line may carry it: a space or a non-ASCII character is
    percent-encoded (UTF-8), as the ``openai`` SDK's client and aiohttp send it; escapes
    already made and reserved characters are kept. Control characters never get here: the
    client refuses such a URL first (:meth:`~rollgym.http.limits.ExchangeLimits.check_url`)."""
    return path if _NEEDS_QUOTING.search(path) is None else quote(path, safe=_TARGET_SAFE)


@functools.lru_cache(maxsize=4096)
def target(url: str) -> Target | None:
    """The target of ``url`` when this module can send it (plain ``http``, no credentials in
    it), else None. Cached: a process posts to a handful of URLs over and over.

    A URL new to the cache (every rollout-scoped model URL is) is parsed only as far as its
    origin, whose parts are cached in turn (:mod:`rollgym.url_origin`); a URL whose path
    ``urlsplit`` would change (a tab, CR or LF in it, a fragment) is parsed whole, as before.
    """
    split = split_origin(url)
    if split is None:
        return _parsed_target(url)
    origin, rest = split
    base = _parsed_target(origin)
    if base is None:
        return None
    return Target(base.host, base.port, base.authority, _request_target(rest))


@functools.lru_cache(maxsize=256)
def _parsed_target(url: str) -> Target | None:
    """:func:`target` by ``urlsplit`` of the whole URL (cached per origin for the short way)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or "@" in parts.netloc or not parts.hostname:
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None  # aiohttp names a bad port in its own error
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(parts.hostname, port, parts.netloc, _request_target(path))


def request_head(
    method: str, where: Target, headers: Mapping[str, str], length: int | None
) -> bytes:
    """The request line and headers; refuses a header that would split the request."""
    lines = [f"{method} {where.path} HTTP/1.1\r\nHost: {where.authority}\r\n"]
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"invalid HTTP header {name!r}: contains a line break or colon")
        lines.append(f"{name}: {value}\r\n")
    if length is not None:
        lines.append(f"Content-Length: {length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("utf-8")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; reads one answer at a time with httptools."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._limit: int | None = None
        #: Whether the exchange in progress passed its deadline (see :meth:`_expire`).
        self._expired = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers = Headers()
        self.body = bytearray()
        self.started = False
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection is not clean
            self.close()
            return
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.error is None:
                self.error = BadAnswer(f"invalid HTTP answer: {exc}")
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None:
            return
        if self.headers_done and self._until_close():
            self.complete = True  # the body was delimited by the close itself
        elif not self.complete and self.error is None:
            self.error = ServerDisconnected(
                "the server closed the connection before the whole answer arrived",
                reused=self.reused,
                answer_started=self.started,
            )
        self._finish()

    # httptools callbacks
    # The lookups below take the name already lower-cased, so they use ``dict.get`` itself:
    # :meth:`Headers.get` would lower-case it again (profiled: seven lookups an answer).
    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.headers
        if key in headers:
            headers[key] = f"{headers[key]}, {text}"
        else:
            headers[key] = text

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status = self.parser.get_status_code()
        declared = _dict_get(self.headers, "content-length") or ""
        limit = self._limit
        if limit is not None and declared.isdigit() and int(declared) > limit:
            self.error = AnswerTooLarge(declared)
            self._finish()

    def on_body(self, body: bytes) -> None:
        self.body += body
        if self._limit is not None and len(self.body) > self._limit and self.error is None:
            self.error = AnswerTooLarge(f"more than {self._limit}")
            self._finish()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._finish()

    def _until_close(self) -> bool:
        """Whether the answer's body runs until the connection closes (no length, unchunked)."""
        return "content-length" not in self.headers and "transfer-encoding" not in self.headers

    def _finish(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _expire(self) -> None:
        """The deadline passed before the whole answer came: the exchange ends with
        ``TimeoutError`` and the connection, its answer half read, is closed."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._expired = True
            self.close()
            waiter.set_result(None)

    async def exchange(
        self, request: bytes, limit: int | None, deadline: float | None = None
    ) -> Answer:
        """Write ``request`` and read its whole answer; ``TimeoutError`` past ``deadline``
        (the loop's clock; None: no limit here)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ServerDisconnected(
                "the pooled connection was already closed", reused=True, answer_started=False
            )
        self._reset()
        self._limit = limit
        self._expired = False
        self._waiter = waiter = self._loop.create_future()
        timer = None if deadline is None else self._loop.call_at(deadline, self._expire)
        try:
            self.transport.write(request)
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if self._expired:
            raise TimeoutError
        if self.error is not None:
            raise self.error
        coding = _dict_get(self.headers, "content-encoding")
        body = bytes(self.body) if coding is None else _inflated(self.body, coding, limit)
        return Answer(self.status, self.headers, body)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


#: zlib window settings per content coding: gzip's header, zlib's header (what ``deflate``
#: means in HTTP); a raw deflate stream is tried when the zlib header is missing.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _inflated(body: bytearray, coding: str, limit: int | None) -> bytes:
    """``body`` decoded from ``coding``, never inflating past ``limit`` bytes."""
    name = coding.strip().lower()
    if name in ("", "identity"):
        return bytes(body)
    wbits = _WBITS.get(name)
    if wbits is None:
        raise BadAnswer(f"the answer's Content-Encoding {coding!r} is not one rollgym reads")
    most = 0 if limit is None else limit + 1
    try:
        inflater = zlib.decompressobj(wbits)
        out = inflater.decompress(body, most)
    except zlib.error:
        if name != "deflate":
            raise BadAnswer(f"the answer's {name} body does not decode") from None
        try:
            inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            out = inflater.decompress(body, most)
        except zlib.error:
            raise BadAnswer("the answer's deflate body does not decode") from None
    if limit is not None and (len(out) > limit or inflater.unconsumed_tail):
        raise AnswerTooLarge(f"more than {limit} once inflated")
    return out


class LeanPool:
    """Keep-alive connections by ``(host, port)``; at most ``limit`` open (0: no cap).

    Idle connections older than ``keepalive_s`` are closed instead of reused, so the pool gives
    a connection up before the server does (see the client's module doc on the race).
    """

    def __init__(self, *, limit: int, keepalive_s: float) -> None:
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None

    async def exchange(
        self,
        where: Target,
        request: bytes,
        *,
        limit: int | None,
        fresh: bool = False,
        on_connection: Callable[[float], None] | None = None,
        deadline: float | None = None,
    ) -> Answer:
        """Send ``request`` (head and body) on a pooled connection, or a new one (``fresh``:
        always new); ``on_connection(seconds)`` gets the wait until a connection was ready.
        ``TimeoutError`` when the whole exchange, waits included, passes ``deadline`` (the
        loop's clock; None: none here)."""
        started = time.perf_counter() if on_connection is not None else 0.0
        slots = self._slots
        if slots is not None:
            if deadline is None or not slots.locked():
                await slots.acquire()
            else:
                async with asyncio.timeout_at(deadline):
                    await slots.acquire()
        try:
            connection = None if fresh else self._pooled(where)
            if connection is None:
                if deadline is None:
                    connection = await self._connect(where)
                else:
                    async with asyncio.timeout_at(deadline):
                        connection = await self._connect(where)
            if on_connection is not None:
                on_connection(time.perf_counter() - started)
            ok = False
            try:
                answer = await connection.exchange(request, limit, deadline)
                ok = connection.keep_alive and not connection.closed
            finally:
                if ok:
                    connection.reused = True
                    connection.idle_since = time.monotonic()
                    self._idle.setdefault((where.host, where.port), []).append(connection)
                else:
                    self._drop(connection)
            return answer
        finally:
            if slots is not None:
                slots.release()

    def _pooled(self, where: Target) -> _Connection | None:
        idle = self._idle.get((where.host, where.port))
        if not idle:
            return None
        oldest = time.monotonic() - self._keepalive_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > oldest:
                return connection
            self._drop(connection)
        return None

    async def _connect(self, where: Target) -> _Connection:
        if self._limit > 0 and len(self._open) >= self._limit:
            self._close_one_idle()
        loop = asyncio.get_running_loop()
        try:
            transport, connection = await loop.create_connection(
                lambda: _Connection(loop), where.host, where.port
            )
        except OSError as exc:
            raise CannotConnect(f"{where.host}:{where.port}", exc) from None
        # uvloop calls ``connection_made`` on the next loop turn, after this returns.
        connection.transport = transport
        self._open.add(connection)
        return connection

    def _close_one_idle(self) -> None:
        """Make room under the cap: close the longest-idle connection of any host."""
        oldest: list[_Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is not None:
            self._drop(oldest.pop(0))

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    def close(self) -> None:
        """Close every connection (the client's ``close``)."""
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()
