"""Helpers of the OpenEnv tests: a real OpenEnv server on loopback, its sessions counted.

The server is ``uvicorn openenv_guess:app`` (the environment of ``openenv_guess.py``, built
with openenv-core's ``create_app``) in a process of its own, as a user runs one; the tests
read how many sessions it opened and closed from its ``/test/sessions`` route.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
from e2e_support import HERE, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def openenv_server(log: Path, mode: str = "ok", app: str = "openenv_guess:app") -> Iterator[str]:
    """A real OpenEnv server (``app``) on a loopback port, its output in ``log``; yields its
    base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(HERE), "GUESS_MODE": mode}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
            + ["--log-level", "warning", "--backlog", "4096"]
            # pings every second, each to be answered within a second (uvicorn's default is 20
            # and 20): a client that leaves its connection unread between steps loses it
            + ["--ws-ping-interval", "1", "--ws-ping-timeout", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for(lambda: _answers(url + "/health") or proc.poll() is not None, 120):
            raise RuntimeError("the OpenEnv test server did not start")
        if proc.poll() is not None:
            raise RuntimeError(f"the OpenEnv test server exited: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def session_counts(url: str) -> dict[str, int]:
    """``{"opened": n, "closed": m}``: environment instances the OpenEnv server made and ended."""
    with urllib.request.urlopen(url + "/test/sessions", timeout=10) as answer:
        counts: dict[str, int] = orjson.loads(answer.read())
        return counts


def open_sessions(url: str) -> int:
    counts = session_counts(url)
    return counts["opened"] - counts["closed"]
