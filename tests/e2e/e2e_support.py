"""Helpers of the ``rollgym run`` end-to-end tests: a job folder, the real CLI, output readers.

Every test here launches real server processes on 127.0.0.1 through the real launcher. The
test agents live in ``agents.py`` beside this file; this folder is put on PYTHONPATH so both
the driver (config validation) and the launched servers can import them as ``agents:<Class>``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def pythonpath() -> str:
    current = os.environ.get("PYTHONPATH")
    return str(HERE) + (os.pathsep + current if current else "")


class Job:
    """A job folder: config.yaml, rows.jsonl, out/; helpers to run it and read its files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_path = root / "job.yaml"
        self.input = root / "rows.jsonl"
        self.out = root / "out"

    #: The telemetry block of a job this helper writes (rows-and-output tests: none).
    default_telemetry: dict[str, Any] = {"preset": "off", "exporter": "none"}

    def write(
        self,
        servers: dict[str, Any],
        rows: list[Any] | None = None,
        *,
        telemetry: dict[str, Any] | None = None,
        **run: Any,
    ) -> Job:
        self.root.mkdir(parents=True, exist_ok=True)
        config = {
            "run": {
                "input": str(self.input),
                "output_dir": str(self.out),
                "retry_backoff_s": 0.01,
                "progress_interval_s": 0.5,
                **run,
            },
            "servers": servers,
            "telemetry": telemetry if telemetry is not None else self.default_telemetry,
        }
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        if rows is not None:
            self.write_rows(rows)
        return self

    def write_rows(self, rows: list[Any]) -> None:
        lines = [r if isinstance(r, str) else orjson.dumps(r).decode() for r in rows]
        self.input.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def command(self, *overrides: str) -> list[str]:
        return [sys.executable, "-m", "rollgym", "run", str(self.config_path), *overrides]

    def env(self, telemetry: bool = False) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": pythonpath()}
        if not telemetry:
            env["OTEL_SDK_DISABLED"] = "true"  # most e2e tests are about rows, not traces
        return env

    def run(
        self, *overrides: str, timeout: float = 120, telemetry: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*overrides),
            env=self.env(telemetry),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )

    def start(self, *overrides: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*overrides),
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.root,
        )

    def serve(self, *names: str, telemetry: bool = False) -> subprocess.Popen[str]:
        """``rollgym serve`` of this job's config (only ``names`` if given): it prints one
        ``name url`` line per server once all are ready, then runs until signalled."""
        return subprocess.Popen(
            [sys.executable, "-m", "rollgym", "serve", str(self.config_path), *names],
            env=self.env(telemetry=True) if telemetry else self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
        )

    def records(self, name: str) -> list[dict[str, Any]]:
        path = self.out / name
        if not path.exists():
            return []
        return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    @property
    def rollouts(self) -> list[dict[str, Any]]:
        return self.records("rollouts.jsonl")

    @property
    def failures(self) -> list[dict[str, Any]]:
        return self.records("failures.jsonl")

    @property
    def summary(self) -> dict[str, Any]:
        return orjson.loads((self.out / "summary.json").read_bytes())

    def line_count(self, name: str) -> int:
        path = self.out / name
        return path.read_bytes().count(b"\n") if path.exists() else 0


def agent(impl: str = "agents:EchoAgent", **options: Any) -> dict[str, Any]:
    return {"kind": "agent", "impl": impl, **options}


def children_of(pid: int) -> list[int]:
    """Live descendants of ``pid`` (a /proc scan; servers run in their own sessions)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(kids)
        frontier.extend(kids)
    return found


def server_pids_alive(
    spec_marker: str = "rollgym.servers.server_process", under: str | None = None
) -> list[int]:
    """PIDs of server processes still running; with ``under``, only those whose environment
    mentions that folder (their spec names the run's output directory)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if spec_marker not in cmdline or state == "Z":
            continue
        if under is not None:
            try:
                if under.encode() not in (entry / "environ").read_bytes():
                    continue
            except OSError:
                continue
        alive.append(int(entry.name))
    return alive


def live_server_pid(run_dir: Path, instance: str) -> int | None:
    """The pid of server instance ``instance`` (``name`` or ``name@<i>``) of the run in
    ``run_dir``, from its ``servers.jsonl`` (the latest start still running), or None.

    The run's file, not ``/proc/<pid>/environ``: a forked server keeps the environment of
    the fork server, not its own spec."""
    from rollgym.incarnations import read_incarnations

    for incarnation in reversed(read_incarnations(run_dir)):
        if incarnation.instance == instance and incarnation.pid is not None:
            if incarnation.pid in server_pids_alive(under=str(run_dir)):
                return incarnation.pid
            return None
    return None


def wait_for(predicate: Any, timeout: float = 60.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def _no_leftover_servers(root: Path) -> Iterator[None]:
    """Fails a test that leaves behind a server process of its own job folder."""
    yield
    assert wait_for(lambda: not server_pids_alive(under=str(root)), timeout=15), (
        f"server processes left behind: {server_pids_alive(under=str(root))}"
    )


@contextmanager
def killed_if_left_running(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Kill ``proc`` (and reap it) if the block ends, by an assertion or a timeout, while it
    still runs: a failed fault test leaves no driver behind."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def send(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> None:
    proc.send_signal(sig)
