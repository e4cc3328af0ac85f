"""Helpers of the OpenEnv tests: a real OpenEnv server on loopback, its sessions counted.

The server is ``uvicorn openenv_guess:app`` (the environment of ``openenv_guess.py``, built
with openenv-core's ``create_app``) in a process of its own, as a user runs one; the tests
read how many sessions it opened and closed from its ``/test/sessions`` route.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e_support import HERE, free_port, get_json, served_process

__all__ = ["free_port", "open_sessions", "openenv_server", "session_counts"]


@contextmanager
def openenv_server(log: Path, mode: str = "ok", app: str = "openenv_guess:app") -> Iterator[str]:
    """A real OpenEnv server (``app``) on a loopback port, its output in ``log``; yields its
    base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(HERE), "GUESS_MODE": mode}
    argv = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "warning", "--backlog", "4096"]
    # pings every second, each to be answered within a second (uvicorn's default is 20 and
    # 20): a client that leaves its connection unread between steps loses it
    argv += ["--ws-ping-interval", "1", "--ws-ping-timeout", "1"]
    with served_process(argv, log, port, "the OpenEnv test server", env=env) as url:
        yield url


def session_counts(url: str) -> dict[str, int]:
    """``{"opened": n, "closed": m}``: environment instances the OpenEnv server made and ended."""
    counts: dict[str, int] = get_json(url + "/test/sessions")
    return counts


def open_sessions(url: str) -> int:
    counts = session_counts(url)
    return counts["opened"] - counts["closed"]
