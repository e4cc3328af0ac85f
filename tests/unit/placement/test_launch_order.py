"""Launch order from server_refs: dependencies first, concurrent within a wave."""

from __future__ import annotations

import asyncio
import time

import pytest

from rollgym.config import validate_config
from rollgym.errors import LaunchError
from rollgym.placement.launcher import _all_or_cancel, dependencies, launch_waves
from server_specs import quickstart_servers


def test_models_and_environments_before_the_agents_that_name_them(tmp_path):
    config = validate_config(
        {
            "run": {"input": str(tmp_path / "rows.jsonl"), "agent": "solver"},
            "servers": quickstart_servers(
                episodes=False,
                remote={"kind": "model", "url": "http://127.0.0.1:1"},
                arith={"model": "policy"},
                walker={"model": "remote"},
            ),
        }
    )
    deps = dependencies(config)
    assert deps == {
        "policy": set(),
        "arith": {"policy"},
        "keys": set(),
        "solver": {"policy", "arith"},
        "walker": {"remote", "keys"},
    }
    assert launch_waves(deps) == [["keys", "policy"], ["arith", "walker"], ["solver"]]


def test_a_cycle_is_a_launch_error():
    with pytest.raises(LaunchError, match="cycle"):
        launch_waves({"a": {"b"}, "b": {"a"}, "c": set()})


def test_the_death_watch_stops_when_the_starts_are_done_not_at_its_next_look():
    """A launch waits for its servers, not for the watcher's next poll."""
    watcher_cancelled = []

    async def start() -> None:
        await asyncio.sleep(0.01)

    async def watch() -> None:
        try:
            await asyncio.sleep(30)  # a look far in the future
        except asyncio.CancelledError:
            watcher_cancelled.append(True)
            raise

    async def launch() -> float:
        began = time.monotonic()
        await _all_or_cancel([start(), start()], watch=watch())
        return time.monotonic() - began

    assert asyncio.run(launch()) < 10
    assert watcher_cancelled == [True]


def test_a_death_the_watch_sees_cancels_the_starts_and_is_raised():
    starts_cancelled = []

    async def start() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            starts_cancelled.append(True)
            raise

    async def watch() -> None:
        await asyncio.sleep(0.01)
        raise LaunchError("exited (1) during the launch", server="arith")

    async def launch() -> None:
        with pytest.raises(LaunchError, match="during the launch"):
            await _all_or_cancel([start(), start()], watch=watch())

    asyncio.run(launch())
    assert starts_cancelled == [True, True]


def test_a_failed_start_cancels_the_watch_and_is_raised():
    async def start() -> None:
        raise LaunchError("not healthy", server="policy")

    async def watch() -> None:
        await asyncio.sleep(30)

    with pytest.raises(LaunchError, match="not healthy"):
        asyncio.run(_all_or_cancel([start()], watch=watch()))
