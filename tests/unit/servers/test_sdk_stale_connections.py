"""The SDK's shared pool survives a connection the server closed while it sat idle.

A real uvicorn server with a short keep-alive (1 s) serves the simulated model in a thread of
its own; the test's loop makes one SDK call, then stays busy (blocked, as a loaded agent's loop
is) until the server has closed that idle connection. The loop has not read the server's FIN,
so the pool still holds the connection as open and hands it to the next call: the exact race
of a loaded machine. The pool's idle expiry is raised above the server's keep-alive for the
test, so only the resend stands between the call and "server disconnected".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvicorn

from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.http.server import create_app
from rollgym.servers import sdk_pool
from rollgym.servers.base import Server
from rollgym.servers.rollout_context import ModelClient, RolloutContext
from rollgym.servers.server_process import bind_loopback
from uvicorn_thread import uvicorn_in_thread
from waits import wait_until

FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0.0}}
ARITH = [{"role": "user", "content": "Compute: 2 + 3\nReply with 'Answer: <number>'."}]
#: Generous: a loaded machine may take seconds to start a server or close a connection.
DEADLINE_S = 60.0


@contextmanager
def _serving_in_thread(server: Server, keep_alive_s: int) -> Iterator[tuple[str, uvicorn.Server]]:
    """The server's app under uvicorn on a loopback port, in a thread with its own loop."""
    config = uvicorn.Config(
        create_app(server),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=keep_alive_s,
    )
    with uvicorn_in_thread(config) as (port, uv):
        yield f"http://127.0.0.1:{port}", uv


def _rollout(client, url: str, rollout_id: str) -> RolloutContext:
    model = ModelClient(client, "policy", url, rollout_id=rollout_id, model_name="sim", timeout=30)
    return RolloutContext(rollout_id, model, None)


def _server_closed_all(uv: uvicorn.Server) -> Callable[[], bool]:
    return lambda: not uv.server_state.connections


@pytest.fixture
def long_lived_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool keeps idle connections longer than the server: stale ones reach a request."""
    monkeypatch.setattr(sdk_pool, "KEEPALIVE_EXPIRY_S", 60.0)


async def test_a_connection_closed_while_idle_is_resent_once_on_a_fresh_one(
    client, long_lived_pool
) -> None:
    with _serving_in_thread(SimulatedModel.build("policy", FAST), keep_alive_s=1) as (url, uv):
        rollout = _rollout(client, url, "s-0")
        sdk = rollout.async_openai()
        first = await sdk.chat.completions.create(model="sim", messages=ARITH)
        pool = sdk_pool.async_pool()
        wait_until(_server_closed_all(uv), "the server to close the idle connection", DEADLINE_S)
        second = await sdk.chat.completions.create(model="sim", messages=ARITH)
        resent = pool.resent
        # a connection that is fine is not resent
        third = await sdk.chat.completions.create(model="sim", messages=ARITH)
        await rollout.aclose()
        await sdk_pool.aclose_async_pool()
    assert (first.id, second.id, third.id) == (
        "chatcmpl-s-0.0",
        "chatcmpl-s-0.1",
        "chatcmpl-s-0.2",
    )
    assert resent == 1
    assert pool.resent == 1


async def test_without_the_resend_the_stale_connection_fails_the_call(
    client, long_lived_pool
) -> None:
    """The control: the same race on the bare pool is the reported failure."""
    from openai import APIConnectionError

    with _serving_in_thread(SimulatedModel.build("policy", FAST), keep_alive_s=1) as (url, uv):
        pool = sdk_pool.async_pool()
        bare = sdk_pool.http_library().AsyncClient(transport=pool.pooled, timeout=30)
        from openai import AsyncOpenAI

        sdk = AsyncOpenAI(base_url=url + "/r/c-0/v1", api_key="k", http_client=bare, max_retries=0)
        await sdk.chat.completions.create(model="sim", messages=ARITH)
        wait_until(_server_closed_all(uv), "the server to close the idle connection", DEADLINE_S)
        with pytest.raises(APIConnectionError):
            await sdk.chat.completions.create(model="sim", messages=ARITH)
        await sdk_pool.aclose_async_pool()


async def test_a_fresh_connection_that_fails_is_not_resent(client) -> None:
    """Nothing listens: the send fails on a new connection, which is never resent."""
    from openai import APIConnectionError

    sock = bind_loopback()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    rollout = _rollout(client, url, "n-0")
    with pytest.raises(APIConnectionError):
        await rollout.async_openai().chat.completions.create(model="sim", messages=ARITH)
    pool = sdk_pool.async_pool()
    await rollout.aclose()
    await sdk_pool.aclose_async_pool()
    assert pool.resent == 0


async def test_a_server_that_hangs_up_is_a_connection_error_not_a_timeout(client) -> None:
    """A server that reads the request and closes without answering: the SDK's aiohttp
    transport would call that ``ConnectTimeout`` (so ``APITimeoutError``, and a rollout failed
    as a timeout); the pool hands the SDK the connection error it was."""
    import asyncio

    from openai import APIConnectionError, APITimeoutError

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    rollout = _rollout(client, url, "h-0")
    sdk = rollout.async_openai().with_options(max_retries=0)
    try:
        with pytest.raises(APIConnectionError) as raised:
            await sdk.chat.completions.create(model="sim", messages=ARITH)
    finally:
        await rollout.aclose()
        await sdk_pool.aclose_async_pool()
        listener.close()
        await listener.wait_closed()
    assert not isinstance(raised.value, APITimeoutError)
    assert "disconnected" in str(raised.value.__cause__).lower()
