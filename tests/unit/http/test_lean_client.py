"""The lean HTTP/1.1 path of ``HttpClient`` (``rollgym.http.lean``) against real loopback servers.

A raw asyncio server answers with exactly the bytes a test scripts (chunked, delimited by the
close, ``Connection: close``, garbage, nothing at all) and counts connections; uvicorn checks
large bodies both ways. Every test goes through ``HttpClient``, as rollgym's processes do, so
the errors asserted are the ones callers see.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import zlib
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rollgym.errors import ConnectError, ConnectionRefused, ExchangeRefused, RequestTimeout
from rollgym.http import lean
from rollgym.http.aiohttp_transport import AiohttpTransport
from rollgym.http.client import HttpClient
from rollgym.http.limits import ExchangeLimits
from uvicorn_thread import uvicorn_in_thread


def _answer(body: bytes, *head: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Content-Type: application/json", *head]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _sized(body: bytes, *head: str) -> bytes:
    return _answer(body, f"Content-Length: {len(body)}", *head)


class Scripted:
    """A raw HTTP server: ``reply(request_no)`` gives the bytes to send (None: hang)."""

    def __init__(self, reply: Callable[[int], bytes | None], close_after: bool = False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests = 0
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                answer = self.reply(self.requests)
                if answer is None:
                    await asyncio.sleep(3600)
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


@contextlib.asynccontextmanager
async def scripted(
    reply: Callable[[int], bytes | None], close_after: bool = False
) -> AsyncIterator[tuple[Scripted, str]]:
    state = Scripted(reply, close_after)
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    try:
        yield state, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/run"
    finally:
        server.close()


async def test_keep_alive_reuses_one_connection_and_sends_json() -> None:
    async with scripted(lambda n: _sized(b'{"n":%d}' % n)) as (server, url), HttpClient() as client:
        answers = [await client.post_json("agent", url, {"i": i}) for i in range(5)]
    assert [a.data for a in answers] == [{"n": n} for n in range(1, 6)]
    assert server.connections == 1
    head = server.heads[0].decode()
    assert head.startswith("POST /run HTTP/1.1\r\n")
    assert "Content-Type: application/json\r\n" in head and "Content-Length: 7\r\n" in head


async def test_a_chunked_answer_is_read_whole() -> None:
    chunked = _answer(
        b'4\r\n{"a"\r\n5\r\n:[1,2\r\n2\r\n]}\r\n0\r\n\r\n', "Transfer-Encoding: chunked"
    )
    async with scripted(lambda n: chunked) as (server, url), HttpClient() as client:
        first = await client.post_json("agent", url, {})
        second = await client.post_json("agent", url, {})
    assert first.data == second.data == {"a": [1, 2]}
    assert server.connections == 1


async def test_an_answer_delimited_by_the_close_is_read_whole_and_not_reused() -> None:
    async with (
        scripted(lambda n: _answer(b'{"until":"close"}'), close_after=True) as (server, url),
        HttpClient() as client,
    ):
        first = await client.post_json("agent", url, {})
        second = await client.post_json("agent", url, {})
    assert first.data == second.data == {"until": "close"}
    assert server.connections == 2


async def test_connection_close_in_the_answer_is_honoured() -> None:
    async with (
        scripted(lambda n: _sized(b"{}", "Connection: close")) as (server, url),
        HttpClient() as client,
    ):
        for _ in range(3):
            assert (await client.post_json("agent", url, {})).data == {}
    assert server.connections == 3


async def test_nothing_listening_is_a_refused_connection_naming_the_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with HttpClient() as client:
        with pytest.raises(ConnectionRefused) as caught:
            await client.post_json("solver", f"http://127.0.0.1:{port}/run", {})
    assert caught.value.server == "solver" and "cannot reach 'solver' (POST /run)" in str(
        caught.value
    )


async def test_a_server_that_never_answers_times_out_and_its_connection_is_dropped() -> None:
    async with (
        scripted(lambda n: None if n == 1 else _sized(b'{"ok":1}')) as (server, url),
        HttpClient() as client,
    ):
        with pytest.raises(RequestTimeout, match=r"no answer from 'agent' within 0.3s"):
            await client.post_json("agent", url, {}, timeout=0.3)
        after = await client.post_json("agent", url, {}, timeout=5)
    assert after.data == {"ok": 1}
    assert server.connections == 2  # the timed-out connection was never reused


async def test_an_invalid_answer_is_a_connection_error() -> None:
    async with scripted(lambda n: b"SPAM/9 what\r\n\r\n") as (_, url), HttpClient() as client:
        with pytest.raises(ConnectError, match="invalid HTTP answer"):
            await client.post_json("agent", url, {})


async def test_a_header_that_would_split_the_request_is_refused_unsent() -> None:
    async with scripted(lambda n: _sized(b"{}")) as (server, url), HttpClient() as client:
        with pytest.raises(ValueError, match="invalid HTTP header 'X-Evil'"):
            await client.post_json("agent", url, {}, headers={"X-Evil": "a\r\nHost: b"})
    assert server.requests == 0


async def test_the_pool_never_opens_more_than_its_limit() -> None:
    async with scripted(lambda n: _sized(b"{}")) as (server, url), HttpClient(limit=2) as client:
        answers = await asyncio.gather(
            *(client.post_json("agent", url, {"i": i}) for i in range(12))
        )
    assert all(a.status == 200 for a in answers)
    assert server.most_open <= 2 and server.requests == 12


async def test_an_idle_connection_past_the_keep_alive_is_not_reused() -> None:
    async with scripted(lambda n: _sized(b"{}")) as (server, url):
        pool = lean.LeanPool(limit=0, keepalive_s=0.05)
        where = lean.target(url)
        assert where is not None
        request = lean.request_head("GET", where, {}, None)
        await pool.exchange(where, request, limit=None)
        await pool.exchange(where, request, limit=None)
        assert server.connections == 1
        await asyncio.sleep(0.1)
        await pool.exchange(where, request, limit=None)
        pool.close()
    assert server.connections == 2


async def test_the_answer_limit_holds_on_the_lean_path() -> None:
    big = b'{"pad":"' + b"x" * 5000 + b'"}'
    chunked = _answer(b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big), "Transfer-Encoding: chunked")
    limits = ExchangeLimits(max_response_bytes=1000)
    async with (
        scripted(lambda n: _sized(big) if n == 1 else chunked) as (_, url),
        HttpClient(limits=limits) as client,
    ):
        with pytest.raises(ExchangeRefused, match="is 5010 bytes, over the limit of 1000"):
            await client.post_json("agent", url, {})
        with pytest.raises(ExchangeRefused, match="more than 1000 bytes"):
            await client.post_json("agent", url, {})


def test_only_plain_http_without_credentials_takes_the_lean_path() -> None:
    assert lean.target("http://127.0.0.1:8000/v1/chat?x=1") == lean.Target(
        "127.0.0.1", 8000, "127.0.0.1:8000", "/v1/chat?x=1"
    )
    assert lean.target("http://[::1]:9/run") == lean.Target("::1", 9, "[::1]:9", "/run")
    assert lean.target("http://example.com") == lean.Target("example.com", 80, "example.com", "/")
    assert lean.target("https://api.openai.com/v1/chat") is None
    assert lean.target("http://user:pw@127.0.0.1:1/run") is None


async def test_rollgym_http_client_aiohttp_sends_everything_through_aiohttp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(lean.ENV_CLIENT, "aiohttp")
    async with scripted(lambda n: _sized(b'{"n":%d}' % n)) as (server, url), HttpClient() as client:
        assert isinstance(client.transport_for(url), AiohttpTransport)
        assert (await client.post_json("agent", url, {})).data == {"n": 1}
    assert b"aiohttp" in server.heads[0]  # aiohttp's User-Agent: it really went that way


@contextlib.contextmanager
def echo_server() -> Iterator[str]:
    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    with uvicorn_in_thread(uvicorn.Config(app, log_level="error", http="httptools")) as (port, _):
        yield f"http://127.0.0.1:{port}/echo"


async def test_large_bodies_both_ways_through_uvicorn() -> None:
    with echo_server() as url:
        async with HttpClient() as client:
            body = {"pad": "é" * 3_000_000, "n": list(range(1000))}
            answers = await asyncio.gather(*(client.post_json("echo", url, body) for _ in range(4)))
    assert all(a.status == 200 and a.data == body for a in answers)


async def test_an_answer_compressed_unasked_is_inflated_or_refused_as_unknown() -> None:
    """No Accept-Encoding is sent, but a server may compress anyway: gzip and deflate (zlib
    or raw) are read as aiohttp would read them; a coding rollgym cannot read is an error."""
    body = b'{"reward":1.0,"pad":"' + b"z" * 4000 + b'"}'
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(body) + raw.flush()
    replies = {
        1: _sized(gzip.compress(body), "Content-Encoding: gzip"),
        2: _sized(zlib.compress(body), "Content-Encoding: deflate"),
        3: _sized(raw_deflate, "Content-Encoding: deflate"),
        4: _sized(b"xx", "Content-Encoding: br"),
    }
    async with scripted(lambda n: replies[n]) as (_, url), HttpClient() as client:
        for _ in range(3):
            answer = await client.post_json("agent", url, {})
            assert answer.data["reward"] == 1.0 and len(answer.data["pad"]) == 4000
        with pytest.raises(ConnectError, match="Content-Encoding 'br'"):
            await client.post_json("agent", url, {})


async def test_answer_headers_are_lower_cased_joined_when_repeated_and_read_in_any_case() -> None:
    answer_bytes = _sized(
        b"{}", "Server-Timing: engine;dur=5", "SERVER-TIMING: sandbox;dur=7", "X-Odd: A"
    )
    async with scripted(lambda n: answer_bytes) as (server, url):
        pool = lean.LeanPool(limit=0, keepalive_s=30.0)
        where = lean.target(url)
        assert where is not None
        try:
            answer = await pool.exchange(
                where, lean.request_head("GET", where, {}, None), limit=None
            )
        finally:
            pool.close()
    assert answer.status == 200 and answer.body == b"{}"
    assert answer.headers["server-timing"] == "engine;dur=5, sandbox;dur=7"
    assert answer.headers.get("Server-Timing") == answer.headers.get("server-timing")
    assert answer.headers.get("x-ODD") == "A" and answer.headers.get("X-Missing") is None
    assert "X-Odd" not in answer.headers and "content-length" in answer.headers


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/r/3-0-a0/v1/chat/completions", "/r/3-0-a0/v1/chat/completions"),
        ("/v1/run#fragment", "/v1/run"),
        ("/v1/run?", "/v1/run"),
        ("/v1/run?a=1", "/v1/run?a=1"),
    ],
)
async def test_the_request_line_is_what_urlsplit_leaves_of_a_url(path: str, sent: str) -> None:
    async with scripted(lambda n: _sized(b"{}")) as (server, url), HttpClient() as client:
        origin = url.removesuffix("/run")
        await client.post_json("agent", origin + "/warm", {})  # the origin's parts cached
        answer = await client.post_json("agent", origin + path, {})
    assert answer.status == 200
    request_line, _, headers = server.heads[1].decode().partition("\r\n")
    assert request_line == f"POST {sent} HTTP/1.1"
    assert headers.startswith(f"Host: {origin[7:]}\r\n")


@pytest.mark.parametrize(
    "path", ["/v1/\r\nHost: evil/x", "/v\t1/ru\nn", "/v1/a\x00b", "/v1/run?x=\x7f"]
)
async def test_a_url_with_a_control_character_is_refused_before_anything_is_sent(
    path: str,
) -> None:
    """``urlsplit`` and aiohttp would quietly drop tab, CR and LF and send another path; the
    ``openai`` SDK's client refuses such a URL, and so does rollgym's, saying where."""
    async with scripted(lambda n: _sized(b"{}")) as (server, url), HttpClient() as client:
        origin = url.removesuffix("/run")
        await client.post_json("agent", origin + "/warm", {})
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("agent", origin + path, {})
        await client.post_json("agent", origin + "/after", {})  # the client still works
    assert caught.value.kind == "invalid_url" and caught.value.server == "agent"
    position = (origin + path).index(next(c for c in path if ord(c) < 32 or ord(c) == 127))
    assert f"at position {position}" in str(caught.value) and "\n" not in str(caught.value)
    assert [head.split(b" ")[1] for head in server.heads] == [b"/warm", b"/after"]


@pytest.mark.parametrize(
    "path", ["/v1/a b?q=x y", "/v1/caf\u00e9?x=\u00fc", "/v1/%41 b", "/r/a b/v1/x"]
)
async def test_spaces_and_non_ascii_go_out_percent_encoded_as_the_openai_sdk_sends_them(
    path: str,
) -> None:
    """The request target the ``openai`` SDK's HTTP client (httpx) would send for the URL."""
    import httpx

    async with scripted(lambda n: _sized(b"{}")) as (server, url), HttpClient() as client:
        origin = url.removesuffix("/run")
        await client.post_json("agent", origin + "/warm", {})
        answer = await client.post_json("agent", origin + path, {})
    assert answer.status == 200
    request_line = server.heads[1].decode("ascii").partition("\r\n")[0]
    assert request_line == f"POST {httpx.URL(origin + path).raw_path.decode()} HTTP/1.1"


async def test_the_time_limit_covers_the_wait_for_a_slot_in_a_full_pool() -> None:
    async with (
        scripted(lambda n: None if n == 1 else _sized(b"{}")) as (server, url),
        HttpClient(limit=1) as client,
    ):
        hanging = asyncio.ensure_future(client.post_json("agent", url, {}, timeout=30))
        while server.requests < 1:
            await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        with pytest.raises(RequestTimeout, match=r"within 0.3s"):
            await client.post_json("agent", url, {}, timeout=0.3)
        assert asyncio.get_running_loop().time() - started < 5
        hanging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hanging
        after = await client.post_json("agent", url, {}, timeout=5)
    assert after.status == 200 and server.requests == 2


async def test_an_exchange_under_its_deadline_leaves_no_timer_behind() -> None:
    async with scripted(lambda n: _sized(b'{"n":%d}' % n)) as (server, url), HttpClient() as client:
        # a limit a loaded machine's loopback exchange cannot miss, then a wait past it
        for i in range(3):
            assert (await client.post_json("agent", url, {}, timeout=1.0)).data == {"n": i + 1}
        await asyncio.sleep(1.2)  # past every deadline: nothing fires, the connection stays
        assert (await client.post_json("agent", url, {}, timeout=5)).data == {"n": 4}
    assert server.connections == 1
