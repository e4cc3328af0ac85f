"""The OpenEnv session's wire against a real OpenEnv server (openenv-core's ``create_app``)
served in the test's own loop."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from rollgym.builtins.envs.openenv_wire import OPEN_SESSION, OpenEnvError, WireSession, ws_url
from uvicorn_thread import uvicorn_in_loop

pytest.importorskip("openenv.core", reason="openenv-core is not installed")

from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402


class _Guess(Action):
    guess: int = 0


class _Closed(Environment[_Guess, Observation, State]):
    """An environment that cannot be created: the server refuses every session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        raise RuntimeError("the guessing game is closed today")

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        raise AssertionError("never created")

    def step(self, action: _Guess, timeout_s: float | None = None, **kw: Any) -> Any:
        raise AssertionError("never created")

    @property
    def state(self) -> State:
        return State()


async def test_a_refused_session_is_said_even_when_the_close_beat_the_first_write() -> None:
    # A loaded machine: the server's refusal and its close have both arrived before the first
    # write (reset), which then fails on the closing connection. The line must still be the
    # refusal, not "the connection failed: Cannot write to closing transport".
    app = create_app(_Closed, _Guess, Observation, env_name="closed", max_concurrent_envs=8)
    async with uvicorn_in_loop(app) as url, aiohttp.ClientSession() as http:
        session = WireSession(http, ws_url(url), connect_timeout_s=10, answer_timeout_s=10)
        await session.connect()
        reader = session._reader  # the connection's reader: done once the close is read
        assert reader is not None
        await asyncio.wait_for(asyncio.shield(reader), 10)
        with pytest.raises(OpenEnvError) as refused:
            await session.reset({})
        await session.close()
    assert refused.value.step == OPEN_SESSION
    assert "the environment could not be created" in str(refused.value)
