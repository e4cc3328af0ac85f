"""Escapes and abuse, each refused or contained by a real bubblewrap sandbox.

Every test checks what the program saw (its exit code and output), that the sandbox reported
the right flags, and that no process of the sandbox is left once the exec returned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from pathlib import Path

import pytest
from sandbox_support import LIMITS, processes_of, requires_sandbox

from rollgym.sandbox import SandboxPool

pytestmark = requires_sandbox


async def test_secrets_home_and_the_run_directory_are_out_of_sight(
    pool: SandboxPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "rollouts.jsonl").write_text("secret rollout\n")
    monkeypatch.setenv("ROLLGYM_TEST_SECRET", "hunter2")
    sandbox = await pool.acquire("r-secrets")
    shadow = await sandbox.exec(["cat", "/etc/shadow"])
    run = await sandbox.exec(["cat", str(run_dir / "rollouts.jsonl")])
    home = await sandbox.exec(["ls", os.path.expanduser("~")])
    env = await sandbox.exec(["env"])
    assert shadow.exit_code != 0 and "Permission denied" in shadow.stderr
    assert run.exit_code != 0 and "No such file" in run.stderr
    assert home.exit_code != 0 or home.stdout == ""
    assert "hunter2" not in env.stdout and "ROLLGYM_TEST_SECRET" not in env.stdout
    assert not processes_of(sandbox.sandbox_id)


async def test_writes_stay_in_the_work_dir_and_persist_between_execs(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-writes")
    outside = [
        await sandbox.exec(f"echo x > {path}") for path in ("/usr/evil", "/etc/motd", "/evil")
    ]
    inside = await sandbox.exec("echo kept > note.txt && mkdir -p d && echo t > /tmp/t")
    later = await sandbox.exec("cat note.txt; ls /tmp")
    assert all(r.exit_code != 0 and "Read-only file system" in r.stderr for r in outside)
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()
    assert inside.ok and later.stdout == "kept\n"  # /work persists, /tmp is per exec
    assert (sandbox.work_dir / "note.txt").read_text() == "kept\n"


async def test_links_left_in_the_work_dir_never_make_the_server_write_outside(
    pool: SandboxPool, tmp_path: Path
) -> None:
    host_file = tmp_path / "host.txt"
    host_file.write_text("host\n")
    tmp_path.chmod(0o755)
    sandbox = await pool.acquire("r-links")
    planted = await sandbox.exec(f"ln -s {host_file} solution.py && ln -s {tmp_path} d")
    assert planted.ok
    ran = await sandbox.exec(["cat", "solution.py"], files={"solution.py": "print('mine')\n"})
    assert ran.stdout == "print('mine')\n"  # the link was replaced by the server's file
    with pytest.raises(ValueError, match="'d' in the work directory is not a folder"):
        sandbox.write_files({"d/evil.txt": "x"})
    assert host_file.read_text() == "host\n" and not (tmp_path / "evil.txt").exists()
    assert not (sandbox.work_dir / "solution.py").is_symlink()


async def test_a_loopback_server_of_the_run_cannot_be_reached(pool: SandboxPool) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the timeout: nobody connected
            accepted.append(server.accept())

    watcher = threading.Thread(target=accept)
    watcher.start()
    sandbox = await pool.acquire("r-net")
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
    result = await sandbox.exec(["python3", "-c", code])
    outside = await sandbox.exec(
        ["python3", "-c", "import socket; socket.getaddrinfo('example.com', 80)"]
    )
    watcher.join()
    server.close()
    assert result.exit_code == 1 and "ConnectionRefusedError" in result.stderr
    assert outside.exit_code == 1 and "gaierror" in outside.stderr
    assert accepted == []


async def test_a_fork_bomb_is_contained_and_leaves_nothing(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-fork")
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = await sandbox.exec(
        ["python3", "-c", bomb], limits=LIMITS.model_copy(update={"wall_s": 3})
    )
    assert result.killed and result.timed_out
    assert not processes_of(sandbox.sandbox_id)
    after = await sandbox.exec(["echo", "still usable"])
    assert after.stdout == "still usable\n"


async def test_a_10_gb_allocation_fails_inside(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-mem")
    result = await sandbox.exec(["python3", "-c", "x = bytearray(10 * 1024 ** 3)"])
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    assert not result.killed


async def test_an_infinite_loop_is_stopped_by_the_cpu_or_wall_limit(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-loop")
    result = await sandbox.exec(["python3", "-c", "while True: pass"])
    assert result.timed_out and result.killed and result.limit in ("cpu", "wall")
    assert result.exit_code in (128 + signal.SIGXCPU, 128 + signal.SIGKILL)
    if pool.cgroup is not None:  # exact CPU accounting from the exec's cgroup
        assert result.cpu_s > 0.5
    sleeper = await sandbox.exec(["sleep", "600"], limits=LIMITS.model_copy(update={"wall_s": 1}))
    assert sleeper.limit == "wall" and sleeper.timed_out
    assert not processes_of(sandbox.sandbox_id)


async def test_a_gigabyte_of_stdout_is_cut_at_the_cap(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-flood")
    flood = "import sys\nfor _ in range(1 << 14):\n    sys.stdout.write('x' * 65536)"
    result = await sandbox.exec(["python3", "-c", flood])
    assert result.limit == "output" and result.killed and result.truncated
    assert len(result.stdout) <= LIMITS.output_bytes
    assert result.stdout_bytes <= LIMITS.output_bytes + 65536  # stopped at the cap, not drained
    assert not processes_of(sandbox.sandbox_id)


async def test_zombies_and_background_processes_do_not_survive_the_exec(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-zombie")
    leave = (
        "import os, subprocess\n"
        "if os.fork() == 0:\n    os._exit(0)\n"  # a child never reaped: a zombie
        "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print('left', flush=True)"
    )
    result = await sandbox.exec(["python3", "-c", leave])
    shell = await sandbox.exec("sleep 600 & echo started")
    assert result.stdout == "left\n" and shell.stdout == "started\n"
    assert not processes_of(sandbox.sandbox_id)


async def test_stdin_files_exit_code_and_accounting(pool: SandboxPool) -> None:
    sandbox = await pool.acquire("r-io")
    result = await sandbox.exec(
        ["python3", "prog.py"],
        stdin="a" * 200_000,
        files={"prog.py": "import sys\ndata = sys.stdin.read()\nprint(len(data))\nsys.exit(3)"},
    )
    assert result.exit_code == 3 and result.stdout == "200000\n" and not result.killed
    assert result.stdout_bytes == 7 and result.stderr_bytes == 0
    with pytest.raises(ValueError, match="relative"):
        sandbox.write_files({"../escape": "x"})
    await pool.release(sandbox)
    await pool.release(sandbox)  # twice is harmless
    assert not sandbox.work_dir.exists()
    assert pool.stats.execs == 1 and pool.stats.destroyed == 1
