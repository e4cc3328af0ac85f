"""Start the trace store as a child process of a run (the driver's embedded default).

Why a child process and not a thread of the driver: ingest must not compete with the driver's
event loop, and the store must outlive nothing: PR_SET_PDEATHSIG makes the kernel kill it when
its parent dies, so a crashed run never leaves a server behind.

``TraceStoreProcess.stop()`` is synchronous (blocks up to ~10 s); from async code call
``await process.astop()``, which runs it in a thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import rollgym.start_gate as start_gate
from rollgym.child_process import describe_exit, read_ready_file, spawn_child
from rollgym.errors import LaunchError
from rollgym.http.listen import bind_loopback
from rollgym.telemetry.pipeline.frames import TRACES_PATH
from rollgym.tracestore.access import TOKEN_ENV
from rollgym.tracestore.serve_command import LINE_PREFIX
from rollgym.tracestore.store import EXIT_UNUSABLE_STORE, UnusableStoreFile

__all__ = ["TraceStoreProcess", "UnusableStoreFile", "check_store_file", "start_trace_store"]

STOP_GRACE_S = 10.0
#: What the child runs: ``rollgym traces serve`` without the rest of the CLI, the store with
#: the viewer the read side mounts on it (a command line, not an import: the store imports
#: nothing above it).
STORE_COMMAND = "rollgym.cli.traces"
#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: How often :meth:`TraceStoreProcess.ready` looks for the ready file.
READY_POLL_S = 0.02


@dataclass
class TraceStoreProcess:
    """A running trace store: ``endpoint`` is the base URL (OTLP at ``endpoint + '/v1/traces'``)."""

    process: subprocess.Popen[bytes]
    endpoint: str
    db_path: Path
    log_path: Path
    #: The file the store writes once it commits at once (its workers started); removed by
    #: :meth:`ready` when seen.
    ready_path: Path | None = None

    @property
    def traces_endpoint(self) -> str:
        return self.endpoint + TRACES_PATH

    def stop(self) -> int | None:
        """SIGTERM (the store commits pending batches), SIGKILL after 10 s; returns exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    async def ready(self, timeout_s: float) -> bool:
        """Wait (bounded) until the store commits requests at once: its ready file is there.
        False when it exited first or ``timeout_s`` ran out. A store started with
        ``wait=True`` is ready already."""
        if self.ready_path is None:
            return self.process.poll() is None
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None:
            if read_ready_file(self.ready_path):
                self.ready_path.unlink(missing_ok=True)
                self.ready_path = None
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(READY_POLL_S)
        return False

    async def astop(self) -> int | None:
        """``stop()`` without blocking the caller's event loop."""
        return await asyncio.to_thread(self.stop)

    def refusal(self) -> str | None:
        """Why the store exited at once, when it found its file unusable (a corrupt or
        truncated ``traces.db``): its one line, from its log. None otherwise."""
        return refusal_of(self.process, self.log_path)


def refusal_of(process: subprocess.Popen[bytes], log_path: Path) -> str | None:
    """The store's one line saying its file is unusable, when it exited for that."""
    if process.poll() != EXIT_UNUSABLE_STORE:
        return None
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    said = next((line for line in reversed(lines) if line.startswith(LINE_PREFIX)), None)
    return said[len(LINE_PREFIX) :] if said else f"{log_path.name}: the store file is unusable"


def start_trace_store(
    db_path: str | Path,
    log_path: str | Path,
    *,
    run_dir: str | Path | None = None,
    compare_dir: str | Path | None = None,
    max_body_bytes: int | None = None,
    timeout_s: float = 30.0,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    wait: bool = True,
) -> TraceStoreProcess:
    """Start ``python -m rollgym.cli.traces serve`` and wait until it answers.

    ``wait=False``: return as soon as it is started, on an IPv4 host, where its listening
    socket is bound here first (:func:`_bind`), so the endpoint is known at once and a
    connection made before the store serves waits in the socket's backlog; a run's servers
    then start beside the store instead of after it (the exporters retry until it answers).

    ``host``/``port`` are where it listens (port 0: a free one); ``token`` (required beyond
    loopback) reaches the child through its environment, never its command line. The
    returned ``endpoint`` is the URL this machine's processes use (loopback for a wildcard
    host).
    A restart passes the ``port`` the store had, so exporters configured with its endpoint
    reach it again.
    """
    db = Path(db_path)
    log = Path(log_path)
    check_store_file(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    ready = log.with_name(log.name + ".ready.json")
    ready.unlink(missing_ok=True)
    command = [sys.executable, "-m", STORE_COMMAND, "serve", "--db", str(db)]
    command += ["--host", host, "--port", str(port)]
    if run_dir is not None:
        command += ["--run-dir", str(run_dir)]
    if compare_dir is not None:
        command += ["--compare", str(compare_dir)]
    if max_body_bytes is not None:
        command += ["--max-body-bytes", str(max_body_bytes)]
    listener = None if wait else _bind(host, port)
    gate = None
    if listener is not None:
        command += ["--listen-fd", str(listener.fileno())]
        port = listener.getsockname()[1]
        # not waited for, so it may wait: while the run's fork server imports, its imports
        # would take the cores the servers wait for (rollgym/start_gate.py)
        gate = start_gate.gate()
        if gate is not None:
            command = start_gate.gated_command(gate, STORE_COMMAND, command[3:])
    # it says where it listens, and that its workers started, in the ready file
    command += ["--ready-file", str(ready)]
    child_env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    if token:
        child_env[TOKEN_ENV] = token
    passed: tuple[int, ...] = () if listener is None else (listener.fileno(),)
    if gate is not None:
        passed += (gate,)
    # its own session: a terminal's Ctrl-C reaches the driver only, which stops the store last
    try:
        process = spawn_child(
            command,
            env=child_env,
            log_path=log,
            on_parent_death=signal.SIGKILL,
            new_session=True,
            pass_fds=passed,
        )
    finally:
        if listener is not None:
            listener.close()  # the store's copy is the one that serves
        if gate is not None:
            os.close(gate)  # the store's copy is the one that waits
    if listener is not None:
        endpoint = _local_url(f"http://{host}:{port}")
        return TraceStoreProcess(process, endpoint, db, log, ready_path=ready)
    try:
        endpoint = _local_url(_wait_ready(process, ready, log, timeout_s))
    except BaseException:
        process.kill()
        process.wait()
        raise
    ready.unlink(missing_ok=True)
    return TraceStoreProcess(process, endpoint, db, log)


def check_store_file(db: Path) -> None:
    """Refuse, in one line naming it, a store file that is no SQLite database
    (a resume on a corrupt or overwritten ``traces.db``): found here in a read of 16 bytes,
    not by a store process that exits and is restarted in vain."""
    try:
        with db.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UnusableStoreFile(f"{db} cannot be read ({exc.strerror or exc})") from None
    if head and head != SQLITE_HEADER:  # an empty file is one SQLite makes a database of
        raise UnusableStoreFile(f"{db} is not a SQLite database (corrupt or overwritten)")


def _bind(host: str, port: int) -> socket.socket | None:
    """A socket listening on ``host``:``port`` for the store to serve; None for a host that is
    not an IPv4 address (the store binds that one itself, and is waited for)."""
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    return bind_loopback(host, port)


def _local_url(endpoint: str) -> str:
    """The store's URL as this machine reaches it: a wildcard bind answers on loopback."""
    for wildcard in ("//0.0.0.0:", "//[::]:", "//:::"):
        if wildcard in endpoint:
            return endpoint.replace(wildcard, "//127.0.0.1:")
    return endpoint


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, log: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            refused = refusal_of(process, log)
            raise LaunchError(
                refused or f"exited ({describe_exit(process.returncode)}) before ready",
                server="tracestore",
            )
        announced = read_ready_file(ready)
        if announced:
            endpoint: str = json.loads(announced)["endpoint"]
            try:
                with urllib.request.urlopen(endpoint + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return endpoint
            except OSError:
                pass
        time.sleep(0.05)
    raise LaunchError(f"not ready after {timeout_s} s", server="tracestore")
