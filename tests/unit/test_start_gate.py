"""rollgym.start_gate: a child started while a hold lasts runs its module only once released."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import rollgym.start_gate as start_gate

PROBE = """
import sys
from pathlib import Path
Path(sys.argv[1]).write_text(" ".join([__name__, *sys.argv[2:]]))
"""


def _start(tmp_path: Path, fd: int) -> subprocess.Popen[bytes]:
    (tmp_path / "gate_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    command = start_gate.gated_command(fd, "gate_probe", [str(tmp_path / "ran"), "a", "b"])
    try:
        return subprocess.Popen(command, env=env, pass_fds=(fd,))
    finally:
        os.close(fd)


def test_nothing_holds_no_gate() -> None:
    assert start_gate.gate() is None


def test_a_gated_child_runs_its_module_once_the_last_hold_is_released(tmp_path: Path) -> None:
    start_gate.hold()
    start_gate.hold()
    released = 0
    try:
        fd = start_gate.gate()
        assert fd is not None
        child = _start(tmp_path, fd)
        time.sleep(1.0)  # time enough to have run, were it not held
        assert child.poll() is None and not (tmp_path / "ran").exists()
        start_gate.release()
        released += 1
        time.sleep(0.5)  # one hold is left
        assert child.poll() is None and not (tmp_path / "ran").exists()
        start_gate.release()
        released += 1
        assert child.wait(timeout=60) == 0
    finally:
        for _ in range(2 - released):
            start_gate.release()
    assert (tmp_path / "ran").read_text() == "__main__ a b"  # as python -m gate_probe a b
    assert start_gate.gate() is None
