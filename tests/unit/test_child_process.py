"""The child-process helper: children die with their parent, log, announce, and say how they ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from procs import alive
from rollgym.child_process import (
    describe_exit,
    log_tail,
    read_ready_file,
    spawn_child,
)
from waits import wait_for, wait_until


def test_exits_are_described_by_status_or_signal() -> None:
    assert describe_exit(None) == "still running"
    assert describe_exit(3) == "exit status 3"
    assert describe_exit(-9) == "killed by SIGKILL (exit status -9)"
    assert describe_exit(-999) == "exit status -999"


def test_log_tail_quotes_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert log_tail(log, lines=3) == "line 47\nline 48\nline 49"
    assert log_tail(tmp_path / "missing.log") == ""


def test_a_ready_file_is_none_until_written(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    assert read_ready_file(ready) is None
    ready.write_text("4318\n")
    assert read_ready_file(ready) == "4318"


def test_a_child_logs_to_its_file(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "child.log"
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
    child = spawn_child([sys.executable, "-c", code], env=dict(os.environ), log_path=log)
    assert child.wait(timeout=60) == 0
    assert sorted(log_tail(log).splitlines()) == ["to stderr", "to stdout"]


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """The parent (a middle process) is SIGKILLed; its child gets the death signal."""
    pid_file = tmp_path / "grandchild.pid"
    middle = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from rollgym.child_process import spawn_child\n"
        "child = spawn_child([sys.executable, '-c', 'import time; time.sleep(120)'],"
        f" env=dict(os.environ), log_path=Path({str(tmp_path / 'g.log')!r}))\n"
        f"Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", middle], env=dict(os.environ))
    wait_until(pid_file.exists, "the middle process to write its child's pid")
    grandchild = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    if not wait_for(lambda: not alive(grandchild), timeout=60):
        os.kill(grandchild, signal.SIGKILL)
        raise AssertionError("the child outlived its killed parent")
