"""HttpClient's limits against real loopback servers: sizes, redirects, credentials in URLs."""

from __future__ import annotations

import base64
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from aiohttp_loopback import serve_on_loopback
from rollgym.errors import ExchangeRefused
from rollgym.http.client import HttpClient
from rollgym.http.limits import ExchangeLimits

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Site:
    """One aiohttp app on 127.0.0.1 with a free port; ``hits`` counts requests it received."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.hits: list[web.Request] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _any(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request)
        await request.read()
        return await self.handler(request)

    async def start(self) -> Site:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._any)
        self._runner, port = await serve_on_loopback(app, access_log=None, shutdown_timeout=0.1)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def sites() -> AsyncIterator[list[Site]]:
    started: list[Site] = []
    yield started
    for site in started:
        await site.stop()


async def _site(sites: list[Site], handler: Handler) -> Site:
    site = await Site(handler).start()
    sites.append(site)
    return site


def _client(**limits: Any) -> HttpClient:
    return HttpClient(limits=ExchangeLimits(**limits))


async def test_a_chunked_answer_past_the_limit_is_refused_while_read(sites: list[Site]) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(64):  # 64 MiB if read whole; the client stops after ~1 MiB
            try:
                await response.write(b"x" * (1 << 20))
            except (ConnectionResetError, RuntimeError):
                break
        return response

    site = await _site(sites, huge)
    async with _client(max_response_bytes=1 << 20) as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("solver", site.url + "/run", {"q": 1})
    assert caught.value.kind == "response_too_large"
    assert "run.max_response_bytes" in str(caught.value) and "'solver'" in str(caught.value)


async def test_a_declared_length_past_the_limit_is_refused_before_reading(
    sites: list[Site],
) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"y" * (3 << 20))

    site = await _site(sites, big)
    async with _client(max_response_bytes=1 << 20) as client:
        with pytest.raises(ExchangeRefused, match=r"is 3145728 bytes, over the limit of 1048576"):
            await client.post_json("solver", site.url + "/run", {})


async def test_an_answer_within_the_limit_is_read_whole(sites: list[Site]) -> None:
    async def fine(request: web.Request) -> web.StreamResponse:
        return web.json_response({"reward": 1.0, "pad": "z" * 5000})

    site = await _site(sites, fine)
    async with _client(max_response_bytes=1 << 20) as client:
        answer = await client.post_json("solver", site.url + "/run", {})
    assert answer.data["reward"] == 1.0 and len(answer.data["pad"]) == 5000


async def test_a_small_compressed_answer_that_inflates_past_the_limit_is_refused(
    sites: list[Site],
) -> None:
    """A declared length counts compressed bytes: the inflated body is what the limit bounds."""
    packed = gzip.compress(b"{" + b" " * (4 << 20) + b"}")

    async def bomb(request: web.Request) -> web.StreamResponse:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=packed, headers=headers)

    site = await _site(sites, bomb)
    assert len(packed) < 1 << 20
    async with _client(max_response_bytes=1 << 20) as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("solver", site.url + "/run", {})
    assert caught.value.kind == "response_too_large"


@pytest.mark.parametrize("credentials", ["", "u:pw@"], ids=["lean", "aiohttp"])
async def test_a_redirect_location_with_a_tab_is_refused_not_followed_elsewhere(
    sites: list[Site], credentials: str
) -> None:
    """``urljoin`` drops a tab: following it would request a path the server never wrote."""

    async def moved(request: web.Request) -> web.StreamResponse:
        if request.path == "/run":
            return web.Response(status=307, headers={"Location": "/v2/\trun"})
        return web.json_response({"reward": 1.0})

    site = await _site(sites, moved)
    async with _client() as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json(
                "solver", site.url.replace("//", "//" + credentials) + "/run", {}
            )
    message = str(caught.value)
    assert caught.value.kind == "invalid_url" and caught.value.server == "solver"
    assert "answered HTTP 307" in message and "'\\t' at position 4" in message
    assert "not followed" in message and "pw" not in message
    assert [hit.path for hit in site.hits] == ["/run"]


async def test_credentials_in_the_url_are_sent_as_basic_auth(sites: list[Site]) -> None:
    async def who(request: web.Request) -> web.StreamResponse:
        return web.json_response({"auth": request.headers.get("Authorization")})

    site = await _site(sites, who)
    async with _client() as client:
        answer = await client.post_json("solver", site.url.replace("//", "//alice:s3cret@"), {})
    assert answer.data["auth"] == "Basic " + base64.b64encode(b"alice:s3cret").decode()
