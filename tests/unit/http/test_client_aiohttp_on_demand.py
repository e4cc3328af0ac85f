"""``HttpClient`` opens its aiohttp pool only for what the lean client does not send.

Plain ``http://`` exchanges never open it (a process whose calls are all plain never imports
aiohttp: a subprocess asserts that, since this test process has imported it already); a URL
with credentials opens it on its first exchange and sends them; its failures are rollgym's
transport errors as the lean client's are.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from test_lean_client import _sized, scripted

from rollgym.errors import ConnectionRefused
from rollgym.http.aiohttp_transport import AiohttpTransport
from rollgym.http.client import HttpClient
from rollgym.http.lean_transport import LeanTransport


async def test_plain_http_never_opens_the_aiohttp_pool_a_credentials_url_does() -> None:
    async with scripted(lambda n: _sized(b'{"n":%d}' % n)) as (server, url), HttpClient() as client:
        assert (await client.post_json("agent", url, {})).data == {"n": 1}
        with_credentials = url.replace("http://", "http://user:secret@")
        fallback = client.transport_for(with_credentials)
        assert isinstance(fallback, AiohttpTransport) and isinstance(
            client.transport_for(url), LeanTransport
        )
        assert not fallback.opened  # the aiohttp pool: not opened for plain http://
        assert (await client.post_json("agent", with_credentials, {})).data == {"n": 2}
        assert fallback.opened
    assert b"authorization: basic" in server.heads[1].lower()
    assert b"aiohttp" in server.heads[1] and b"aiohttp" not in server.heads[0]


async def test_a_refused_credentials_url_is_a_refused_connection() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with HttpClient() as client:
        with pytest.raises(ConnectionRefused, match="cannot reach 'model'"):
            await client.post_json("model", f"http://u:p@127.0.0.1:{port}/v1", {})


def test_a_process_whose_exchanges_are_plain_never_imports_aiohttp() -> None:
    probe = """
import asyncio, sys
from rollgym.http.aiohttp_transport import AiohttpTransport
from rollgym.http.client import HttpClient
from rollgym.http.lean_transport import LeanTransport
from rollgym.placement.health import HealthSession

async def main():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with HttpClient() as client, HealthSession() as session:
        for call in (client.post_json("x", f"http://127.0.0.1:{port}/run", {}),
                     session.get(f"http://127.0.0.1:{port}/health")):
            try:
                await call
            except Exception as exc:  # refused: nothing listens any more
                print(type(exc).__name__)
asyncio.run(main())
print("aiohttp" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["ConnectionRefused", "ConnectionRefusedError", "False"], (
        done.stdout + done.stderr
    )
