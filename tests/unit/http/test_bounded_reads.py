"""Slow and half-sent requests: rollgym's servers and its trace store drop them in bounded time.

Real uvicorn (with rollgym's protocol: on h11, on httptools, and the lean cycle) and the real store app on
loopback; the read limit is shortened to 0.5 s so the test is quick, and every wait is generous.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from rollgym.http.bounded_httptools import BoundedHttpToolsProtocol
from rollgym.http.bounded_reads import BoundedH11Protocol, lean_cycle_supported
from rollgym.http.lean_server import LeanHttpToolsProtocol
from rollgym.tracestore.lifecycle import build_app, make_runner
from rollgym.tracestore.writer import BatchWriter
from uvicorn_thread import uvicorn_in_thread

LIMIT_S = 0.5
#: How long a test waits for the server to hang up: far above LIMIT_S, far below "forever".
PATIENCE_S = 30.0

HALF_SENT = [
    b"",  # connects, sends nothing
    b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le",  # half a head
    b'POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"q": ',  # half a body
]


class QuickBoundedH11(BoundedH11Protocol):
    read_timeout_s = LIMIT_S


class QuickBoundedHttpTools(BoundedHttpToolsProtocol):
    read_timeout_s = LIMIT_S


class QuickLean(LeanHttpToolsProtocol):
    read_timeout_s = LIMIT_S


PROTOCOLS = pytest.mark.parametrize(
    "protocol",
    [
        QuickBoundedH11,
        QuickBoundedHttpTools,
        pytest.param(
            QuickLean,
            marks=pytest.mark.skipif(
                not lean_cycle_supported(), reason="the lean cycle is off under this uvicorn"
            ),
        ),
    ],
    ids=["h11", "httptools", "lean"],
)


@contextlib.contextmanager
def uvicorn_server(protocol: type[asyncio.Protocol]) -> Iterator[int]:
    app = FastAPI()

    @app.post("/run")
    async def run() -> dict[str, float]:
        await asyncio.sleep(2 * LIMIT_S)  # a slow handler is not a slow client
        return {"reward": 1.0}

    with uvicorn_in_thread(uvicorn.Config(app, log_level="error", http=protocol)) as (port, _):
        yield port


def _hung_up(port: int, sent: bytes) -> bool:
    """Send ``sent`` and nothing more; True when the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn:
        conn.sendall(sent)
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


@PROTOCOLS
@pytest.mark.parametrize("sent", HALF_SENT, ids=["nothing", "half-head", "half-body"])
def test_uvicorn_with_rollgyms_protocol_drops_a_half_sent_request(
    protocol: type[asyncio.Protocol], sent: bytes
) -> None:
    with uvicorn_server(protocol) as port:
        assert _hung_up(port, sent)


def _answer(conn: socket.socket) -> bytes:
    answer = b""
    while b"reward" not in answer:
        chunk = conn.recv(4096)
        assert chunk, "the server hung up on a whole request"
        answer += chunk
    return answer


@PROTOCOLS
def test_a_whole_request_with_a_slow_handler_is_answered(protocol: type[asyncio.Protocol]) -> None:
    with (
        uvicorn_server(protocol) as port,
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn,
    ):
        conn.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert _answer(conn).startswith(b"HTTP/1.1 200")


@PROTOCOLS
def test_a_kept_alive_connection_is_bounded_again_on_its_next_request(
    protocol: type[asyncio.Protocol],
) -> None:
    """The first request answered, the second sent by halves: the limit applies anew."""
    with (
        uvicorn_server(protocol) as port,
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn,
    ):
        conn.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert _answer(conn).startswith(b"HTTP/1.1 200")
        conn.sendall(HALF_SENT[2])
        try:
            while conn.recv(4096):
                pass
        except ConnectionResetError:
            pass  # hung up: what the test wants
        except TimeoutError:
            pytest.fail("a half-sent second request held its kept-alive connection")


@contextlib.asynccontextmanager
async def store_app(tmp_path: Path) -> AsyncIterator[int]:
    from aiohttp import web

    writer = BatchWriter(tmp_path / "traces.db")
    writer.start()
    runner = make_runner(
        build_app(writer, 1 << 20, read_timeout_s=LIMIT_S),
        LIMIT_S,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
        await asyncio.to_thread(writer.close)


@pytest.mark.parametrize("sent", HALF_SENT, ids=["nothing", "half-head", "half-body"])
async def test_the_trace_store_drops_a_half_sent_request(tmp_path: Path, sent: bytes) -> None:
    sent = sent.replace(b"/run", b"/v1/traces")
    async with store_app(tmp_path) as port:
        assert await asyncio.to_thread(_hung_up, port, sent)


def test_the_lean_cycle_only_under_the_uvicorn_it_was_tested_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rollgym.http.bounded_reads import bounded_protocol, lean_cycle_supported

    assert lean_cycle_supported("0.54.0") and lean_cycle_supported("0.54.12")
    assert lean_cycle_supported("0.55.0")
    assert not lean_cycle_supported("0.56.0") and not lean_cycle_supported("0.29.0")
    assert not lean_cycle_supported("garbage")
    monkeypatch.delenv("ROLLGYM_HTTP_SERVER", raising=False)
    monkeypatch.delenv("ROLLGYM_HTTP_PARSER", raising=False)
    expected = LeanHttpToolsProtocol if lean_cycle_supported() else BoundedHttpToolsProtocol
    assert bounded_protocol() is expected
    monkeypatch.setattr(uvicorn, "__version__", "99.0.0")  # a release it was not tested on
    assert bounded_protocol() is BoundedHttpToolsProtocol
