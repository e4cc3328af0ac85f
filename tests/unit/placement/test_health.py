"""wait_healthy against real loopback servers: healthy, refusing, wrong answers, an early exit."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aiohttp_loopback import serve_on_loopback
from rollgym.errors import LaunchError
from rollgym.placement.health import HealthSession, wait_healthy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def session() -> AsyncIterator[HealthSession]:
    async with HealthSession() as client:
        yield client


async def _serve(handler: Handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/health", handler)
    runner, port = await serve_on_loopback(app)
    return runner, f"http://127.0.0.1:{port}"


def _failure(problem: str) -> LaunchError:
    return LaunchError(problem, server="x")


async def _healthy(
    url: str | None, session: HealthSession, within_s: float = 20.0, **options: Any
) -> str:
    """``wait_healthy`` of ``url`` given ``within_s`` seconds (a generous 20 unless the test
    is about running out of time), failures named for server ``x``."""
    return await wait_healthy(
        url, session=session, deadline=time.monotonic() + within_s, failure=_failure, **options
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_healthy_server_answers_with_its_url(session: HealthSession) -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    runner, url = await _serve(ok)
    try:
        got = await _healthy(url, session)
    finally:
        await runner.cleanup()
    assert got == url


async def test_the_url_can_come_from_a_ready_file(session: HealthSession, tmp_path: Path) -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    runner, url = await _serve(ok)
    ready = tmp_path / "ready"
    port = url.rsplit(":", 1)[1]
    asyncio.get_running_loop().call_later(0.2, ready.write_text, port)
    try:
        got = await _healthy(None, session, ready_file=ready)
    finally:
        await runner.cleanup()
    assert got == f"http://127.0.0.1:{port}"


async def test_a_wrong_answer_is_named_when_time_runs_out(
    session: HealthSession,
) -> None:
    async def starting(request: web.Request) -> web.Response:
        return web.json_response({"status": "starting"})

    runner, url = await _serve(starting)
    try:
        with pytest.raises(LaunchError, match="not healthy in time .*'starting'"):
            await _healthy(url, session, 0.5)
        # a server given by url: only has to answer below 500
        got = await _healthy(url, session, strict=False)
        assert got == url
    finally:
        await runner.cleanup()


async def test_an_error_status_is_not_healthy_even_when_lenient(
    session: HealthSession,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=503)

    runner, url = await _serve(broken)
    try:
        with pytest.raises(LaunchError, match="HTTP 503"):
            await _healthy(url, session, 0.5, strict=False)
    finally:
        await runner.cleanup()


async def test_nothing_listening_fails_early_with_refused_for_s(
    session: HealthSession,
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(LaunchError, match="refusing connections for 1 s: nothing listens"):
        await wait_healthy(
            url, session=session, deadline=started + 60, failure=_failure, refused_for_s=1.0
        )
    assert time.monotonic() - started < 30


async def test_a_child_that_exits_first_is_a_failure_naming_its_exit(
    session: HealthSession, tmp_path: Path
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait(timeout=60)
    with pytest.raises(LaunchError, match=r"exited \(exit status 3\) before it was healthy"):
        await _healthy(None, session, ready_file=tmp_path / "never", process=child)


async def test_credentials_in_a_url_are_sent_and_an_answer_not_json_is_named(
    session: HealthSession,
) -> None:
    """A ``url:`` with credentials goes through aiohttp (the lean client does not send them),
    which sends them as basic auth; an answer that is not JSON is the problem named."""
    seen: list[str | None] = []

    async def guarded(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") is None:
            return web.Response(status=401)
        return web.Response(text="not json")

    runner, url = await _serve(guarded)
    with_credentials = url.replace("http://", "http://user:secret@")
    try:
        got = await _healthy(with_credentials, session, strict=False)
        assert got == with_credentials
        assert seen and seen[-1] is not None and seen[-1].startswith("Basic ")
        with pytest.raises(LaunchError, match="not healthy in time .*JSONDecodeError"):
            await _healthy(with_credentials, session, 0.5)
    finally:
        await runner.cleanup()
