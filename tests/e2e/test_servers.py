"""Real server processes on loopback, started and stopped by the launcher."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from procs import each_process, parent_of
from rollgym.config import JobConfig, validate_config
from rollgym.errors import LaunchError
from rollgym.http.client import HttpClient
from rollgym.identity import episode_body
from rollgym.placement import launcher
from rollgym.placement.launcher import launch_servers
from waits import wait_for

pytestmark = pytest.mark.e2e

FAST = {"kind": "fixed", "seconds": 0.001}

CUSTOM_MODULE = """
from rollgym.servers.agent import Agent
from rollgym.servers.environment import Environment


class NoRewardAgent(Agent):
    async def run(self, row, rollout):
        return {"score": 1}


class CrashyEnv(Environment):
    def __init__(self, context):
        raise RuntimeError("crashy refuses to start: the vault is missing")
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def make_config(tmp_path: Path, servers: dict, **run) -> JobConfig:
    return validate_config(
        {"run": {"input": str(tmp_path / "rows.jsonl"), **run}, "servers": servers}
    )


def full_servers() -> dict:
    return {
        "policy": {"kind": "model", "impl": "simulated", "accuracy": 1.0, "latency": FAST},
        "arith": {"kind": "environment", "impl": "arithmetic", "model": "policy"},
        "keys": {"kind": "environment", "impl": "keychain", "model": "policy"},
        "solver": {
            "kind": "agent",
            "impl": "single_turn",
            "model": "policy",
            "environment": "arith",
        },
        "walker": {"kind": "agent", "impl": "tool_loop", "model": "policy", "environment": "keys"},
        "silent": {"kind": "agent", "impl": "custom_servers:NoRewardAgent"},
    }


@pytest.fixture
def custom_module(tmp_path, monkeypatch) -> dict[str, str]:
    """A module of custom servers importable here and in the launched processes."""
    (tmp_path / "custom_servers.py").write_text(CUSTOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def launched_pids(parent: int | None = None) -> list[int]:
    """PIDs of server processes (``-m rollgym.servers.server_process``) whose parent is ``parent``
    (default: this test process), from /proc (Linux)."""
    parent = os.getpid() if parent is None else parent
    return [
        pid
        for pid, (stat, cmdline) in each_process("stat", "cmdline")
        if parent_of(stat) == parent and b"rollgym.servers.server_process" in cmdline
    ]


def row(task_index: int, **task) -> dict:
    return {**task, "task_index": task_index, "rollout_index": 0, "attempt": 0}


async def test_full_stack_answers_rewards_and_stops_every_process(tmp_path, custom_module):
    config = make_config(tmp_path, full_servers(), max_request_bytes=4096)
    out = tmp_path / "out"
    async with launch_servers(config, run_id="e2e", output_dir=out, env=custom_module) as urls:
        running = launched_pids()
        assert sorted(urls) == sorted(full_servers())
        assert len(running) == 6
        async with HttpClient() as client:
            health = await client.get_json("walker", urls["walker"] + "/health")
            arith = await client.post_json(
                "solver", urls["solver"] + "/run", row(0, question="(3 + 4) * 6")
            )
            keys = await client.post_json(
                "walker", urls["walker"] + "/run", row(1, seed=11, hops=4)
            )
            episode = await client.post_json(
                "keys", urls["keys"] + "/run", episode_body("ep-0", 0, {"seed": 2, "hops": 3})
            )
            huge = await client.post_json(
                "solver", urls["solver"] + "/run", row(2, question="1+1", pad="x" * 10000)
            )
            silent = await client.post_json("silent", urls["silent"] + "/run", row(3))
    assert health.data == {"status": "ok", "name": "walker", "kind": "agent"}
    assert arith.status == 200 and arith.data["reward"] == 1.0
    assert keys.status == 200 and keys.data["reward"] == 1.0 and keys.data["tool_calls"] == 4
    assert episode.status == 200 and episode.data["reward"] == 1.0
    assert huge.status == 413 and huge.data["field"] == "body" and "4096" in huge.data["error"]
    assert silent.status == 500 and "without a numeric 'reward'" in silent.data["error"]
    assert not any(alive(pid) for pid in running)
    # graceful stop: each server flushed telemetry and wrote its counts
    counts = json.loads((out / "logs" / "walker.telemetry.json").read_text())
    assert set(counts) >= {"spans_exported", "spans_dropped"}


async def test_exception_inside_the_block_stops_every_process(tmp_path):
    config = make_config(tmp_path, {k: v for k, v in full_servers().items() if k != "silent"})
    out = tmp_path / "out"
    running: list[int] = []
    with pytest.raises(RuntimeError, match="driver failed"):
        async with launch_servers(config, run_id="e2e", output_dir=out, env={}):
            running = launched_pids()
            raise RuntimeError("driver failed")
    assert len(running) == 5
    assert not any(alive(pid) for pid in running)


async def test_cancellation_stops_every_process(tmp_path):
    config = make_config(
        tmp_path, {"policy": full_servers()["policy"], "keys": full_servers()["keys"]}
    )
    out = tmp_path / "out"
    started = asyncio.Event()

    async def driver() -> None:
        async with launch_servers(config, run_id="e2e", output_dir=out, env={}):
            started.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(driver())
    await asyncio.wait_for(started.wait(), 60)
    running = launched_pids()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(running) == 2
    assert not any(alive(pid) for pid in running)


async def test_crash_at_start_is_a_launch_error_quoting_the_log(tmp_path, custom_module):
    servers = {
        "policy": full_servers()["policy"],
        "vault": {"kind": "environment", "impl": "custom_servers:CrashyEnv"},
    }
    config = make_config(tmp_path, servers)
    out = tmp_path / "out"
    with pytest.raises(LaunchError) as info:
        async with launch_servers(config, run_id="e2e", output_dir=out, env=custom_module):
            pytest.fail("the block must not run")
    assert info.value.server == "vault"
    assert "crashy refuses to start: the vault is missing" in str(info.value)
    assert "exited (exit status 1) before it was healthy" in str(info.value)
    assert launched_pids() == []


async def test_url_servers_are_health_checked_not_launched(tmp_path, monkeypatch):
    first = make_config(tmp_path, {"policy": full_servers()["policy"]})
    async with launch_servers(first, run_id="e2e", output_dir=tmp_path / "a", env={}) as urls:
        second = make_config(tmp_path, {"remote": {"kind": "model", "url": urls["policy"]}})
        async with launch_servers(
            second, run_id="e2e", output_dir=tmp_path / "b", env={}
        ) as remote_urls:
            assert remote_urls == {"remote": urls["policy"]}
            assert len(launched_pids()) == 1  # only the first launch's server
    monkeypatch.setattr(launcher, "HEALTH_TIMEOUT_S", 0.5)
    dead = make_config(tmp_path, {"remote": {"kind": "model", "url": "http://127.0.0.1:9"}})
    with pytest.raises(LaunchError, match="remote"):
        async with launch_servers(dead, run_id="e2e", output_dir=tmp_path / "c", env={}):
            pass


def test_servers_die_with_a_killed_driver(tmp_path):
    """kill -9 of the driver: PR_SET_PDEATHSIG takes its servers down with it."""
    out = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import asyncio
        from rollgym.config import validate_config
        from rollgym.placement.launcher import launch_servers

        config = validate_config({{"run": {{"input": "rows.jsonl"}},
            "servers": {{"policy": {{"kind": "model", "impl": "simulated"}}}}}})

        async def main():
            async with launch_servers(config, run_id="e2e", output_dir={str(out)!r}, env={{}}):
                print("up", flush=True)
                await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "up"
        running = launched_pids(driver.pid)
        assert len(running) == 1
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        assert wait_for(lambda: not any(alive(pid) for pid in running), timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
