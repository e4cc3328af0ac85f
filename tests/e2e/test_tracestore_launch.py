"""The store as a child process: ready on a free port, dies with its parent, stops gracefully."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from procs import alive as _alive
from rollgym.tracestore.store_process import start_trace_store
from waits import wait_for

pytestmark = pytest.mark.e2e

_PARENT = """
import sys, time
from rollgym.tracestore.store_process import start_trace_store
store = start_trace_store(sys.argv[1], sys.argv[2])
print(store.process.pid, flush=True)
time.sleep(60)
"""


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
        assert wait_for(lambda: not _alive(child), timeout=60)
    finally:
        parent.kill()


def test_stop_is_graceful_and_port_is_chosen(tmp_path: Path) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    assert store.endpoint.startswith("http://127.0.0.1:") and not store.endpoint.endswith(":0")
    assert store.stop() == 0
    assert "stopped (0 spans written)" in (tmp_path / "store.log").read_text()
