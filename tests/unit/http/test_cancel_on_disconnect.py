"""A request whose client goes away is cancelled, hop after hop, on real servers on loopback.

Each of rollgym's server protocols (the lean cycle, uvicorn's httptools cycle under
``ROLLGYM_HTTP_SERVER=uvicorn``, uvicorn's h11 cycle) serves a handler that would wait far
longer than its client does; the client (rollgym's own) gives up, which closes its connection,
and the handler must be cancelled, quietly (no traceback logged, no 500 written). Then a chain
of two servers: a client gives up on server A, whose handler is waiting on server B (a plain
call or a stream); B's handler must be cancelled too, so the close travelled on down. The client's aiohttp path
(TLS, credentials in the URL) closes a timed-out connection as the lean one does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi import FastAPI
from starlette.responses import StreamingResponse

from rollgym.errors import RequestTimeout
from rollgym.http.bounded_httptools import BoundedHttpToolsProtocol
from rollgym.http.bounded_reads import BoundedH11Protocol
from rollgym.http.client import HttpClient
from rollgym.http.lean import ENV_CLIENT
from rollgym.http.lean_server import LeanHttpToolsProtocol
from uvicorn_thread import uvicorn_in_thread

PROTOCOLS = {
    "lean": LeanHttpToolsProtocol,
    "uvicorn-httptools": BoundedHttpToolsProtocol,
    "uvicorn-h11": BoundedH11Protocol,
}
#: How long a handler would wait if nobody cancelled it: far beyond every bound below.
FOREVER_S = 120.0
#: How long a test waits for a cancellation to arrive: generous for a loaded machine.
PATIENCE_S = 30.0
#: The client's time limit: it gives up long before the handler would answer.
GIVE_UP_S = 0.3


class Handlers:
    """What the handlers of one server saw, readable from the test's thread."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.finished = threading.Event()

    async def wait_forever(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(FOREVER_S)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.finished.set()


def _waiting_app(seen: Handlers) -> FastAPI:
    app = FastAPI()

    @app.post("/wait")
    async def wait() -> dict[str, str]:
        await seen.wait_forever()
        return {"late": "answer"}

    @app.post("/quick")
    async def quick() -> dict[str, str]:
        return {"quick": "answer"}

    @app.post("/stream")
    async def stream() -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            yield b"data: first\n\n"
            await seen.wait_forever()
            yield b"data: never\n\n"

        return StreamingResponse(parts(), media_type="text/event-stream")

    return app


def _calling_app(next_url: str) -> FastAPI:
    """Server A: each request waits on server B, a plain call or a stream (an agent's model
    call, a model server's call to its engine)."""
    app = FastAPI()

    @app.post("/call")
    async def call() -> dict[str, object]:
        async with HttpClient() as client:
            answer = await client.post_json("b", next_url + "/wait", {})
        return {"status": answer.status}

    @app.post("/call-stream")
    async def call_stream() -> dict[str, object]:
        async with HttpClient() as client, client.stream("b", next_url + "/stream", {}) as answer:
            lines = [line async for line in answer.content]
        return {"lines": len(lines)}

    return app


@contextmanager
def _served(app: FastAPI, protocol: type[asyncio.Protocol]) -> Iterator[str]:
    config = uvicorn.Config(
        app, http=protocol, lifespan="off", ws="none", log_config=None, access_log=False
    )
    with uvicorn_in_thread(config) as (port, _):
        yield f"http://127.0.0.1:{port}"


async def _give_up(url: str) -> None:
    """Post and give up after :data:`GIVE_UP_S` (the client closes its connection)."""
    async with HttpClient() as client:
        with pytest.raises(RequestTimeout):
            await client.post_json("server", url, {}, timeout=GIVE_UP_S)


async def _cancelled(seen: Handlers) -> bool:
    return await asyncio.to_thread(seen.cancelled.wait, PATIENCE_S)


@pytest.mark.parametrize("protocol", PROTOCOLS.values(), ids=PROTOCOLS.keys())
async def test_a_handler_whose_client_gave_up_is_cancelled_quietly(
    protocol: type[asyncio.Protocol], caplog: pytest.LogCaptureFixture
) -> None:
    seen = Handlers()
    with caplog.at_level(logging.INFO), _served(_waiting_app(seen), protocol) as url:
        await _give_up(url + "/wait")
        assert await _cancelled(seen), "the handler ran on after its client had gone"
        async with HttpClient() as client:  # the server serves on as before
            answer = await client.post_json("server", url + "/quick", {}, timeout=PATIENCE_S)
        assert answer.status == 200 and answer.data == {"quick": "answer"}
    assert not seen.finished.is_set()
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any("Exception in ASGI application" in line for line in logged), logged
    assert not any("without starting response" in line for line in logged), logged


@pytest.mark.parametrize("protocol", PROTOCOLS.values(), ids=PROTOCOLS.keys())
async def test_a_stream_whose_client_gave_up_is_cancelled(
    protocol: type[asyncio.Protocol],
) -> None:
    seen = Handlers()
    with _served(_waiting_app(seen), protocol) as url:
        async with HttpClient() as client, client.stream("server", url + "/stream", {}) as answer:
            assert await answer.content.readline() == b"data: first\n"
            assert await asyncio.to_thread(seen.started.wait, PATIENCE_S)
        # the block left mid-stream: the connection is closed, not pooled
        assert await _cancelled(seen), "the stream ran on after its client had gone"


@pytest.mark.parametrize("route", ["/call", "/call-stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS.values(), ids=PROTOCOLS.keys())
async def test_giving_up_on_a_server_stops_the_call_it_was_waiting_on(
    protocol: type[asyncio.Protocol], route: str
) -> None:
    seen = Handlers()
    with (
        _served(_waiting_app(seen), protocol) as b_url,
        _served(_calling_app(b_url), protocol) as a_url,
    ):
        await _give_up(a_url + route)
        assert await _cancelled(seen), "server B's handler ran on: server A's call was not closed"
    assert not seen.finished.is_set()


async def test_a_timed_out_call_through_aiohttp_closes_its_connection_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TLS and credentialed URLs go through aiohttp, not the lean client: the same rule."""
    monkeypatch.setenv(ENV_CLIENT, "aiohttp")
    seen = Handlers()
    with _served(_waiting_app(seen), LeanHttpToolsProtocol) as url:
        await _give_up(url + "/wait")
        assert await _cancelled(seen), "aiohttp kept the timed-out connection open"


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_an_sdk_call_given_up_closes_its_connection(how: str) -> None:
    """An agent's OpenAI SDK call (the shared SDK pool under every rollout's client)."""
    openai = pytest.importorskip("openai")
    from rollgym.servers.sdk_pool import aclose_async_pool, async_pool, http_library

    seen = Handlers()
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> dict[str, str]:
        await seen.wait_forever()
        return {}

    with _served(app, LeanHttpToolsProtocol) as url:
        client = openai.AsyncOpenAI(
            base_url=url + "/v1",
            api_key="unused",
            http_client=http_library().AsyncClient(transport=async_pool()),
            max_retries=0,
            timeout=GIVE_UP_S if how == "timeout" else PATIENCE_S,
        )
        message = [{"role": "user", "content": "hi"}]
        call = asyncio.create_task(client.chat.completions.create(model="m", messages=message))
        if how == "cancel":
            assert await asyncio.to_thread(seen.started.wait, PATIENCE_S)
            call.cancel()
        try:
            with pytest.raises((asyncio.CancelledError, openai.APITimeoutError)):
                await call
            assert await _cancelled(seen), "the SDK kept the abandoned connection open"
        finally:
            await client.close()
            await aclose_async_pool()
