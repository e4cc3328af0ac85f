"""Start the trace store as a child process of a run (the driver's embedded default).

Why a child process and not a thread of the driver: ingest must not compete with the driver's
event loop, and the store must outlive nothing: PR_SET_PDEATHSIG makes the kernel kill it when
its parent dies, so a crashed run never leaves a server behind.

``TraceStoreProcess.stop()`` is synchronous (blocks up to ~10 s); from async code call
``await process.astop()``, which runs it in a thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rollgym.errors import LaunchError

_PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 10.0


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class TraceStoreProcess:
    """A running trace store: ``endpoint`` is the base URL (OTLP at ``endpoint + '/v1/traces'``)."""

    process: subprocess.Popen[bytes]
    endpoint: str
    db_path: Path
    log_path: Path

    @property
    def traces_endpoint(self) -> str:
        return self.endpoint + "/v1/traces"

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

    async def astop(self) -> int | None:
        """``stop()`` without blocking the caller's event loop."""
        return await asyncio.to_thread(self.stop)


def start_trace_store(
    db_path: str | Path,
    log_path: str | Path,
    *,
    run_dir: str | Path | None = None,
    max_body_bytes: int | None = None,
    timeout_s: float = 30.0,
    port: int = 0,
) -> TraceStoreProcess:
    """Start ``python -m rollgym.tracestore serve --port 0`` and wait until it answers.

    ``port``: 0 lets the store pick one; a restart asks for the port it had, so exporters
    configured with its endpoint reach it again.
    """
    db = Path(db_path)
    log = Path(log_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    ready = log.with_name(log.name + ".ready.json")
    ready.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "rollgym.tracestore",
        "serve",
        "--db",
        str(db),
        "--port",
        str(port),
    ]
    command += ["--ready-file", str(ready)]
    if run_dir is not None:
        command += ["--run-dir", str(run_dir)]
    if max_body_bytes is not None:
        command += ["--max-body-bytes", str(max_body_bytes)]
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    try:
        endpoint = _wait_ready(process, ready, timeout_s)
    except BaseException:
        process.kill()
        process.wait()
        raise
    ready.unlink(missing_ok=True)
    return TraceStoreProcess(process, endpoint, db, log)


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LaunchError(
                f"exited (exit status {process.returncode}) before ready", server="tracestore"
            )
        if ready.exists():
            endpoint = json.loads(ready.read_text())["endpoint"]
            try:
                with urllib.request.urlopen(endpoint + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return endpoint
            except OSError:
                pass
        time.sleep(0.05)
    raise LaunchError(f"not ready after {timeout_s} s", server="tracestore")
