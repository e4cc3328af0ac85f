"""The keep-alive race: a request written on a pooled connection the server is closing.

A raw asyncio server plays the server side exactly, so the race is reproduced on every run
rather than by luck: it answers the first request of a connection with keep-alive, then
closes the connection as soon as the next request arrives on it, without answering (what a
server whose idle timer fired at that instant does). A second test drives real uvicorn with a
short keep-alive and requests timed around its idle close.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import uvicorn
from fastapi import FastAPI

from rollgym.driver.dispatch import transport_failure
from rollgym.errors import ConnectError
from rollgym.http.client import KEEPALIVE_S, SERVER_KEEPALIVE_S, HttpClient
from uvicorn_thread import uvicorn_in_thread

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class RawServer:
    """Counts what it receives; ``policy(connection_no, request_no_on_connection)`` says what to
    do with each request: ``"answer"``, ``"close"`` (close without a byte) or ``"cut"``
    (send the head and half the body, then close)."""

    def __init__(self, policy: Callable[[int, int], str]) -> None:
        self.policy = policy
        self.connections = 0
        self.requests: list[tuple[int, int]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn_no = self.connections
        request_no = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                request_no += 1
                self.requests.append((conn_no, request_no))
                action = self.policy(conn_no, request_no)
                if action == "close":
                    break
                if action == "cut":
                    writer.write(OK[: len(OK) - 5])
                    await writer.drain()
                    break
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def raw_server(policy: Callable[[int, int], str]) -> AsyncIterator[tuple[RawServer, str]]:
    state = RawServer(policy)
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield state, f"http://127.0.0.1:{port}/seed_session"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_request_on_a_reused_connection_the_server_closed_is_resent_once() -> None:
    # Connection 1: answers request 1, then closes on request 2 without reading it further.
    async with raw_server(lambda conn, req: "close" if (conn, req) == (1, 2) else "answer") as (
        server,
        url,
    ):
        async with HttpClient() as client:
            first = await client.post_json("arith", url, {"rollout_id": "r1"})
            second = await client.post_json("arith", url, {"rollout_id": "r2"})
        assert (first.status, second.status) == (200, 200)
        assert second.data == {"ok": True}
        # The second request went out twice: on the stale connection, then on a fresh one.
        assert server.requests == [(1, 1), (1, 2), (2, 1)]
        assert client.resent == 1


async def test_a_fresh_connection_closed_before_the_answer_is_not_resent() -> None:
    async with raw_server(lambda conn, req: "close") as (server, url):
        async with HttpClient() as client:
            with pytest.raises(ConnectError) as caught:
                await client.post_json("arith", url, {"rollout_id": "r1"})
        # The driver retries it as a connection error.
        failure = transport_failure(caught.value)
        assert failure.transient and failure.kind == "connection_error"
        assert "arith" in str(caught.value) and caught.value.server == "arith"
        # The server may have run it: the client must not send it again.
        assert server.requests == [(1, 1)]
        assert client.resent == 0


async def test_an_answer_cut_after_it_started_is_not_resent() -> None:
    async with raw_server(lambda conn, req: "cut" if req == 2 else "answer") as (server, url):
        async with HttpClient() as client:
            await client.post_json("arith", url, {"rollout_id": "r1"})
            with pytest.raises(ConnectError):
                await client.post_json("arith", url, {"rollout_id": "r2"})
        assert server.requests == [(1, 1), (1, 2)]
        assert client.resent == 0


def test_the_pool_gives_idle_connections_up_before_rollgym_servers_do() -> None:
    assert KEEPALIVE_S < SERVER_KEEPALIVE_S


@contextlib.contextmanager
def uvicorn_server(keep_alive_s: float) -> Iterator[str]:
    app = FastAPI()

    @app.post("/seed_session")
    async def seed() -> dict[str, bool]:
        return {"ok": True}

    config = uvicorn.Config(app, log_level="error", timeout_keep_alive=keep_alive_s)  # type: ignore[arg-type]
    with uvicorn_in_thread(config) as (port, _):
        yield f"http://127.0.0.1:{port}/seed_session"


async def test_requests_timed_around_uvicorns_idle_close_all_succeed() -> None:
    """uvicorn closes idle connections after 0.2 s here; 40 connections are each reused at
    instants spread across that close. Without the resend some of them fail."""
    keep_alive = 0.2
    with uvicorn_server(keep_alive) as url:
        async with HttpClient() as client:
            for round_no in range(6):
                await asyncio.gather(*(client.post_json("arith", url, {}) for _ in range(40)))
                # Reuse the pooled connections at instants around the server's idle close.
                delays = [keep_alive * (0.9 + 0.2 * i / 40) for i in range(40)]

                async def later(delay: float) -> int:
                    await asyncio.sleep(delay)
                    return (await client.post_json("arith", url, {})).status

                statuses = await asyncio.gather(*(later(d) for d in delays))
                assert statuses == [200] * 40, f"round {round_no}"
