"""Local servers forked from one fork server: adopted by the driver, served, stopped, reaped."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from procs import alive
from rollgym.config import JobConfig, validate_config, validate_read
from rollgym.config.data import ConfigRead, read_config
from rollgym.errors import LaunchError
from rollgym.placement import forked
from rollgym.placement.forked import ENV_FORK_SERVER
from rollgym.placement.launcher import launch_servers
from rollgym.servers.fork_server import FORK_SERVER_ARG
from server_specs import quickstart_servers, simulated_model

pytestmark = pytest.mark.e2e

_PR_GET_CHILD_SUBREAPER = 37


def servers() -> dict:
    """The model, one environment and a single-turn agent with two replicas."""
    return quickstart_servers(
        model=simulated_model(0.001), keys=None, walker=None, solver={"replicas": 2}
    )


def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> dict:
    """Write the user's server module ``name`` into ``tmp_path`` and make it importable here
    and in the launched servers; returns their environment."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def with_arith(**user_environments: str) -> dict:
    """The arithmetic environment, beside a user environment of each ``name=impl``."""
    extra = {
        name: {"kind": "environment", "impl": impl} for name, impl in user_environments.items()
    }
    return {"arith": {"kind": "environment", "impl": "arithmetic"}, **extra}


async def arith_served(job: JobConfig, out: Path, run_id: str, holds: Callable[[], bool]) -> str:
    """Launch ``job``'s arithmetic environment into ``out``; while it answers, ``holds`` must
    be true; then stop it and let the fork server go. The fork server's log."""
    try:
        async with launch_servers(job, run_id=run_id, output_dir=out, env={}) as urls:
            assert reply(urls["arith"]) == 200
            assert holds()
    finally:
        forked.discard_for(out)
    return (out / "logs" / "fork-server.log").read_text()


def config(tmp_path: Path, server_map: dict) -> JobConfig:
    return validate_config({"run": {"input": str(tmp_path / "rows.jsonl")}, "servers": server_map})


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def subreaper() -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    return flag.value


def reply(url: str) -> int:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as answer:
        return int(answer.status)


async def test_servers_are_forked_adopted_by_the_driver_and_stopped(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    out = tmp_path / "out"
    async with launch_servers(
        config(tmp_path, servers()), run_id="f", output_dir=out, env={}
    ) as urls:
        for name in ("policy", "arith", "solver"):
            for url in urls.replicas_of(name):
                assert reply(url) == 200
        pids = {pid: cmdline(pid) for pid in _launched_pids(out)}
        # policy, arith, solver and solver@1; the fork server (same command line, same
        # folder in its environment) has exited
        assert len(pids) == 4, pids
        for pid, line in pids.items():
            # forked, not spawned: each keeps the fork server's command line ...
            assert FORK_SERVER_ARG in line, line
            # ... and, the fork server gone, is this process's own child
            assert parent_of(pid) == os.getpid()
        # the flag that adopted them is dropped once they are ours
        assert subreaper() == 0
        assert (out / "logs" / "fork-server.log").exists()
    for pid in pids:
        assert not alive(pid), f"server {pid} left running"
        with pytest.raises(ChildProcessError):  # reaped, not left a zombie
            os.waitpid(pid, os.WNOHANG)


async def test_without_the_fork_server_each_server_is_spawned(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_FORK_SERVER, "0")
    out = tmp_path / "out"
    server_map = with_arith()
    async with launch_servers(
        config(tmp_path, server_map), run_id="s", output_dir=out, env={}
    ) as urls:
        assert reply(urls["arith"]) == 200
        (pid,) = _launched_pids(out)
        assert FORK_SERVER_ARG not in cmdline(pid)
        assert parent_of(pid) == os.getpid()
    assert not (out / "logs" / "fork-server.log").exists()


async def test_a_forked_server_that_cannot_start_names_itself_and_its_log(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    env = user_module(
        tmp_path,
        monkeypatch,
        "broken_servers",
        "from rollgym.servers.environment import Environment\n"
        "class Broken(Environment):\n"
        "    def __init__(self, context):\n"
        "        raise RuntimeError('broken refuses to start: no vault')\n",
    )
    server_map = with_arith(broken="broken_servers:Broken")
    out = tmp_path / "out"
    with pytest.raises(LaunchError) as caught:
        async with launch_servers(
            config(tmp_path, server_map), run_id="b", output_dir=out, env=env
        ):
            pass
    message = str(caught.value)
    assert "broken" in message and "no vault" in message
    assert not _launched_pids(out)


def _launched_pids(out: Path) -> list[int]:
    """Live server processes of this run (forked ones name the run's logs folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not alive(int(entry.name)):
            continue
        try:
            line = cmdline(int(entry.name))
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        ours = parent_of(int(entry.name)) == os.getpid()
        if ours and "rollgym.servers.server_process" in line and str(out).encode() in environ:
            found.append(int(entry.name))
    return found


async def test_a_fork_server_started_ahead_is_the_one_that_forks(tmp_path, monkeypatch):
    """A run starts its fork server before its trace store (its imports overlap the store's
    start); the launch takes that one over instead of starting another."""
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    out = tmp_path / "out"
    job = config(tmp_path, with_arith())
    forked.prestart_for(job, out)
    ahead = forked._prestarted[out / "logs"].process.pid
    # taken over: no longer waiting among the started-ahead ones
    log = await arith_served(job, out, "p", lambda: out / "logs" not in forked._prestarted)
    assert f"fork server {ahead}: forked arith as pid" in log, log
    assert log.count("fork server ") == 1, log


async def test_a_fork_server_no_launch_took_is_let_go(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    out = tmp_path / "out"
    job = config(tmp_path, with_arith())
    forked.prestart_for(job, out)
    process = forked._prestarted[out / "logs"].process
    forked.discard_for(out)
    # Never asked for a server, it has no children: stopped at once, not waited for while
    # it finishes imports nobody needs.
    assert process.poll() == -signal.SIGKILL and not forked._prestarted


async def test_a_server_class_that_starts_a_thread_at_import_is_spawned(tmp_path, monkeypatch):
    """Forking a process with a thread running copies it half-stopped: the fork server
    declines, and that server is spawned; the one forked before it (sorted first) stays
    forked."""
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    env = user_module(
        tmp_path,
        monkeypatch,
        "threaded_servers",
        "import threading, time\n"
        "from rollgym.servers.environment import Environment\n"
        "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
        "class Threaded(Environment):\n"
        "    pass\n",
    )
    server_map = with_arith(zthreaded="threaded_servers:Threaded")
    out = tmp_path / "out"
    job = config(tmp_path, server_map)
    async with launch_servers(job, run_id="t", output_dir=out, env=env) as urls:
        assert reply(urls["arith"]) == 200 and reply(urls["zthreaded"]) == 200
        lines = sorted(cmdline(pid) for pid in _launched_pids(out))
        assert len(lines) == 2
        assert sum(FORK_SERVER_ARG in line for line in lines) == 1, lines


def in_folder(job: JobConfig, out: Path) -> JobConfig:
    return job.model_copy(update={"run": job.run.model_copy(update={"output_dir": str(out)})})


async def test_a_fork_server_started_before_the_run_folder_is_bound_to_it(tmp_path, monkeypatch):
    """Started right after the config is read (before the run's folder exists), it writes to
    a temporary log; the run binds it to logs/fork-server.log (the early lines come along),
    and that one forks the run's servers."""
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    out = tmp_path / "out"
    job = in_folder(config(tmp_path, with_arith()), out)
    forked.start_early(job)
    early = forked._early
    assert early is not None and early.early
    temporary = early.log_path
    assert temporary.exists() and not (out / "logs").exists()
    assert (
        f"{forked.ENV_FORK_SERVER_LOGS}={out / 'logs'}".encode()
        in Path(f"/proc/{early.process.pid}/environ").read_bytes()
    )  # the run's folder, in its servers' environment too
    forked.prestart_for(job, out)
    assert forked._early is None and forked._prestarted[out / "logs"] is early
    assert early.log_path == out / "logs" / "fork-server.log"
    # its lines moved to the run's log before it forked
    log = await arith_served(job, out, "e", lambda: not temporary.exists())
    assert f"fork server {early.process.pid}: forked arith as pid" in log, log


async def test_an_early_fork_server_no_run_took_is_let_go(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    job = config(tmp_path, with_arith())
    forked.start_early(job)
    assert forked._early is None  # no run.output_dir: the folder is named later
    forked.start_early(in_folder(job, tmp_path / "out"))
    early = forked._early
    assert early is not None
    forked.discard_early()
    assert early.process.poll() == -signal.SIGKILL and forked._early is None
    assert not early.log_path.exists()


async def test_no_early_fork_server_for_ray_or_servers_by_url(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    by_url = config(tmp_path, {"m": {"kind": "model", "url": "http://127.0.0.1:9"}})
    forked.start_early(by_url)
    assert forked._early is None
    ray = validate_config(
        {
            "run": {"input": str(tmp_path / "rows.jsonl"), "placement": "ray"},
            "servers": {"arith": {"kind": "environment", "impl": "arithmetic"}},
        }
    )
    forked.start_early(ray)
    assert forked._early is None


@pytest.mark.parametrize("fork", [True, False])
async def test_servers_collect_garbage_and_forked_ones_share_a_frozen_import(
    tmp_path, monkeypatch, fork
):
    """The collector is off while a server process imports its stack and on when it serves;
    the fork server freezes what it imported, so its servers' collections skip (and do not
    copy) those objects."""
    if fork:
        monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    else:
        monkeypatch.setenv(ENV_FORK_SERVER, "0")
    report = tmp_path / "gc.txt"
    env = user_module(
        tmp_path,
        monkeypatch,
        "gc_servers",
        "import gc\n"
        "from rollgym.servers.environment import Environment\n"
        "class GcState(Environment):\n"
        "    def __init__(self, context):\n"
        "        super().__init__(context)\n"
        f"        with open({str(report)!r}, 'w') as f:\n"
        "            f.write(f'{gc.isenabled()} {gc.get_freeze_count()}')\n",
    )
    server_map = {"gc": {"kind": "environment", "impl": "gc_servers:GcState"}}
    out = tmp_path / "out"
    async with launch_servers(
        config(tmp_path, server_map), run_id="g", output_dir=out, env=env
    ) as urls:
        assert reply(urls["gc"]) == 200
    enabled, frozen = report.read_text().split()
    assert enabled == "True"
    assert (int(frozen) > 0) is fork


def read_from(tmp_path: Path, data: dict) -> ConfigRead:
    """A config as the CLI reads it before validating (its YAML and overrides applied)."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return read_config(path)


async def test_a_fork_server_starts_from_the_config_as_read_before_validation(
    tmp_path, monkeypatch
):
    """The CLI starts it from the raw config (before pydantic is even imported): the run's
    folder and classes come from the YAML, and validation then hands it to the launch."""
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    data = {
        "run": {"input": "rows.jsonl", "output_dir": "out"},
        "servers": {"arith": {"kind": "environment", "impl": "arithmetic"}},
    }
    read = read_from(tmp_path, data)
    forked.start_early_from(read)
    early = forked._early
    assert early is not None and early.run_logs == tmp_path / "out" / "logs"
    assert (
        f"{forked.ENV_FORK_SERVER_LOGS}={tmp_path / 'out' / 'logs'}".encode()
        in Path(f"/proc/{early.process.pid}/environ").read_bytes()
    )
    job = validate_read(read)
    forked.start_early(job)  # the one started from the raw config stays the one
    assert forked._early is early
    out = tmp_path / "out"
    forked.prestart_for(job, out)
    log = await arith_served(job, out, "r", lambda: True)
    assert f"fork server {early.process.pid}: forked arith as pid" in log, log


async def test_a_raw_config_that_says_too_little_starts_no_fork_server(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_FORK_SERVER, raising=False)
    arith = {"arith": {"kind": "environment", "impl": "arithmetic"}}
    for data in (
        {"run": {"input": "rows.jsonl"}, "servers": arith},  # the folder is named later
        {"run": {"input": "r", "output_dir": "o", "placement": "ray"}, "servers": arith},
        {"run": {"input": "r", "output_dir": "o"}, "servers": {"m": {"kind": "model", "url": "x"}}},
        {"run": {"input": "r", "output_dir": "o"}, "servers": ["not", "a", "mapping"]},
    ):
        forked.start_early_from(read_from(tmp_path, data))
        assert forked._early is None, data
    # one started for a folder validation does not confirm is let go by the run's launch
    forked.start_early_from(read_from(tmp_path, {"run": {"output_dir": "o"}, "servers": arith}))
    early = forked._early
    assert early is not None
    forked.prestart_for(config(tmp_path, arith), tmp_path / "elsewhere")
    assert early.process.poll() == -signal.SIGKILL
    forked.discard_for(tmp_path / "elsewhere")
