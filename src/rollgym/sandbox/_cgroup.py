"""cgroup v2 accounting for sandbox execs, where this process may create cgroups.

Each exec runs in its own child cgroup of the pool's cgroup. That gives three things the
rlimits cannot: the exact CPU time of every process the exec started (``cpu.stat``, which
``wait4`` misses because bubblewrap's inner init is never reaped by the outer one), a
kill of all of them at once (``cgroup.kill``) and proof that none is left (``populated 0``)
before the cgroup is removed. Where the ``memory`` and ``pids`` controllers can be enabled
for the pool, ``memory.max`` and ``pids.max`` bound the exec as a whole too.

Where no cgroup v2 hierarchy is writable (an unprivileged server without delegation), the
pool runs without: limits come from rlimits alone and CPU time from ``wait4``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from rollgym.sandbox._bwrap import program
from rollgym.sandbox.limits import SandboxLimits

_EMPTY_WAIT_S = 10.0


def _cgroup2_mount() -> Path | None:
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                return Path(fields[4])
    return None


def _own_cgroup() -> str | None:
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as groups:
        for line in groups:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def create_pool_cgroup(name: str) -> Path | None:
    """A cgroup for the pool under this process's own v2 cgroup, or None where not allowed."""
    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    path = mount / own.lstrip("/") / name
    try:
        path.mkdir()
    except OSError:
        return None
    _enable_controllers(path)
    return path


def _enable_controllers(path: Path) -> None:
    """Let execs have memory/pids limits where the parent offers those controllers."""
    with contextlib.suppress(OSError):
        available = (path / "cgroup.controllers").read_text().split()
        wanted = [f"+{c}" for c in ("memory", "pids") if c in available]
        if wanted:
            (path / "cgroup.subtree_control").write_text(" ".join(wanted))


def remove_cgroup(path: Path) -> None:
    """Remove a cgroup after killing whatever is still in it (bounded wait)."""
    kill_all(path)
    deadline = time.monotonic() + _EMPTY_WAIT_S
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)


class ExecCgroup:
    """The cgroup of one exec: created before it starts, removed when it has ended."""

    def __init__(self, parent: Path, name: str, limits: SandboxLimits) -> None:
        self.path = parent / name
        self.path.mkdir()
        self.procs = self.path / "cgroup.procs"
        with contextlib.suppress(OSError):
            (self.path / "memory.max").write_text(str(limits.memory_mb * 1024 * 1024))
        with contextlib.suppress(OSError):
            (self.path / "pids.max").write_text(str(limits.processes))

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) of every process that ever ran in this cgroup."""
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def finish(self) -> None:
        """Kill anything left, wait until the cgroup is empty, remove it."""
        remove_cgroup(self.path)


def kill_all(path: Path) -> None:
    """SIGKILL every process in ``path`` (``cgroup.kill``, or one by one on older kernels)."""
    try:
        (path / "cgroup.kill").write_text("1")
        return
    except FileNotFoundError:
        pass
    except OSError:
        return
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)


def is_populated(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return "populated 1" in (path / "cgroup.events").read_text()
    return False


def enter_cgroup_argv(procs: Path, switch_user: bool, uid: int, gid: int) -> list[str]:
    """A prefix that moves itself into the cgroup, drops to the sandbox user, then execs.

    The move happens before ``bwrap`` starts, so every process of the exec is inside from its
    first instruction (moving ``bwrap`` from outside after spawning it would race its forks).
    """
    # the shell exports PWD: unset, so bwrap's processes start with LAUNCH_ENV alone
    prefix = [program("sh"), "-c", 'unset PWD; echo $$ > "$0" && exec "$@"', str(procs)]
    if switch_user:
        prefix += [program("setpriv"), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    return prefix
