"""The store as a child process: ready on a free port, dies with its parent, stops gracefully."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollgym.tracestore.store_process import start_trace_store

pytestmark = pytest.mark.e2e

_PARENT = """
import sys, time
from rollgym.tracestore.store_process import start_trace_store
store = start_trace_store(sys.argv[1], sys.argv[2])
print(store.process.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_store_dies_with_its_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path / "traces.db"), str(tmp_path / "log")],
        stdout=subprocess.PIPE,
    )
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()


def test_stop_is_graceful_and_port_is_chosen(tmp_path: Path) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    assert store.endpoint.startswith("http://127.0.0.1:") and not store.endpoint.endswith(":0")
    assert store.stop() == 0
    assert "stopped (0 spans written)" in (tmp_path / "store.log").read_text()
