"""Helpers of the ``rollgym run`` end-to-end tests: a job folder, the real CLI, output readers.

Every test here launches real server processes on 127.0.0.1 through the real launcher. The
test agents live in ``agents.py`` beside this file; this folder is put on PYTHONPATH so both
the driver (config validation) and the launched servers can import them as ``agents:<Class>``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml

from procs import each_process, parent_of, zombie
from waits import wait_for as wait_for  # the e2e tests import it from here

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

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python -m rollgym <args>`` (any command: ``traces show``, ``export`` ...) in the
        job folder, with this job's environment; its output captured."""
        return subprocess.run(
            [sys.executable, "-m", "rollgym", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )

    def start(
        self,
        *overrides: str,
        telemetry: bool = False,
        env: Mapping[str, str] | None = None,
        stdout: int = subprocess.PIPE,
        stderr: int = subprocess.STDOUT,
    ) -> subprocess.Popen[str]:
        """``rollgym run`` of this job in the background, its output and errors on one pipe
        (``stdout`` / ``stderr`` say otherwise: ``subprocess.PIPE`` apart, ``DEVNULL``); the
        job's environment (with telemetry if asked) unless ``env`` is given."""
        return subprocess.Popen(
            self.command(*overrides),
            env=dict(env) if env is not None else self.env(telemetry),
            stdout=stdout,
            stderr=stderr,
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

    def wait_rollouts(self, n: int, timeout: float = 60) -> None:
        """Block until the running job has written ``n`` rollouts; fails saying how many."""
        written = lambda: self.line_count("rollouts.jsonl")  # noqa: E731
        assert wait_for(lambda: written() >= n, timeout=timeout), (
            f"{written()} of {n} rollouts written within {timeout:g} s"
        )


def agent(impl: str = "agents:EchoAgent", **options: Any) -> dict[str, Any]:
    return {"kind": "agent", "impl": impl, **options}


def assert_no_traceback(out: Path, *texts: str, except_logs: str = "") -> None:
    """No Python traceback in ``texts`` (a run's console) nor in the logs of the run in
    ``out``, but those whose name ends with ``except_logs`` (a foreign server's own log)."""
    logs = [
        p.read_text()
        for p in (out / "logs").glob("*.log")
        if not (except_logs and p.name.endswith(except_logs))
    ]
    for text in (*texts, *logs):
        assert "Traceback" not in text, text[-3000:]


def children_of(pid: int) -> list[int]:
    """Live descendants of ``pid`` (a /proc scan; servers run in their own sessions)."""
    parents = {
        child: parent_of(stat) for child, (stat,) in each_process("stat") if not zombie(stat)
    }
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
    marker = spec_marker.encode()
    return [
        pid
        for pid, (cmdline, stat, environ) in each_process("cmdline", "stat", "environ")
        if marker in cmdline.replace(b"\0", b" ")
        and not zombie(stat)
        and (under is None or under.encode() in environ)
    ]


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


def max_overlap(records: list[dict[str, Any]]) -> int:
    """Most rollouts whose [started_at, finished_at] intervals overlap at one instant: the
    concurrency a run reached, measured from its records rather than assumed."""
    events = sorted(
        [(r["started_at"], 1) for r in records] + [(r["finished_at"], -1) for r in records]
    )
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def traces_check(
    out: Path, *options: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``rollgym traces check [options] OUT`` (``--data``, ``--json`` ...) in a child process
    with ``env`` (default: this process's); its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "check", *options, str(out)],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answers(url: str) -> bool:
    """Whether ``url`` answers a GET at all (any status, within two seconds)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def get_json(url: str) -> Any:
    """The JSON body of a GET of ``url``."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return orjson.loads(answer.read())


@contextmanager
def served_process(argv: list[str], log: Path, port: int, what: str, **popen: Any) -> Iterator[str]:
    """A server started from ``argv`` (its output in ``log``) that listens on ``port``:
    yields its base URL once ``/health`` answers; SIGTERM (then a kill) when the block ends.
    ``what`` names the server in the error if it exits or never comes up."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for(lambda: answers(url + "/health") or proc.poll() is not None, 120):
            raise RuntimeError(f"{what} did not start")
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        yield url
    finally:
        stop_process(proc, timeout=20)


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM ``proc`` and reap it (reading what it still writes to its pipes); SIGKILL it
    if it is not gone within ``timeout`` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=30)


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
