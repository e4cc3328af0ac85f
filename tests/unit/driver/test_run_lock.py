"""One run at a time in an output directory; death releases the lock; a bad folder is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollgym.driver.run_lock import LOCK_FILE, RunLock
from rollgym.errors import ConfigError, RunDirBusy
from waits import wait_until

HOLD = """
import sys, time
from pathlib import Path
from rollgym.driver.run_lock import RunLock
lock = RunLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    with RunLock(tmp_path / "out"):
        with pytest.raises(RunDirBusy) as caught:
            RunLock(tmp_path / "out").acquire()
        message = str(caught.value)
        assert f"pid {os.getpid()}" in message and " since " in message
        assert "another run.output_dir" in message
    RunLock(tmp_path / "out").acquire().release()  # released: the next one gets it


def test_kill_9_of_the_holder_leaves_no_stuck_lock(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"):
            RunLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    wait_until(lambda: _free(tmp_path), "the lock to be free once its holder is killed")
    assert (tmp_path / LOCK_FILE).exists()


def _free(run_dir: Path) -> bool:
    """Whether the run lock of ``run_dir`` can be taken (it is released at once)."""
    try:
        RunLock(run_dir).acquire().release()
    except RunDirBusy:
        return False
    return True


def test_an_output_dir_that_cannot_exist_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError) as caught:
        RunLock(tmp_path / "file" / "out").acquire()
    assert caught.value.key_path == "run.output_dir"
    assert f"cannot write the output directory {tmp_path / 'file' / 'out'}" in str(caught.value)
