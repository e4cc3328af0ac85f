"""Without a cgroup: find and kill an exec's processes that outlive it, by their marker.

When ``bwrap`` ends, the kernel tears its pid namespace down, but asynchronously: a fork
bomb's children can still be alive for a moment after the exec was reaped. With a cgroup the
exec waits until the cgroup is empty; without one, each exec's processes carry its name in
their environment (``_ROLLGYM_SANDBOX_EXEC``), and this sweep kills any still there before
the exec returns. Bounded: it gives up after ``_SWEEP_S`` (a process that rewrote its own
environment escapes the sweep, not the namespace teardown).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_SWEEP_S = 10.0


def marked_processes(marker: bytes) -> list[int]:
    """Live processes whose environment holds ``marker`` (``NAME=value``) exactly."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_stragglers(marker: bytes) -> int:
    """SIGKILL every process carrying ``marker`` until none is left; how many were found."""
    killed: set[int] = set()
    deadline = time.monotonic() + _SWEEP_S
    while time.monotonic() < deadline:
        pids = marked_processes(marker)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.01)
    return len(killed)
