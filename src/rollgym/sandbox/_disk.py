"""The writable storage of one sandbox, bounded by its disk quota (``SandboxLimits.disk_mb``).

A command can write in three places: its work directory ``/work`` (kept between the execs of
a sandbox), ``/tmp`` and ``/dev/shm`` (fresh for every exec). Where the server may mount
filesystems (root, or ``CAP_SYS_ADMIN``), each sandbox gets one tmpfs of ``disk_mb`` on the
host, holding all three as subdirectories: the kernel refuses a write past the quota with
``ENOSPC`` ("No space left on device"), whatever the command does, and the whole sandbox
(persistent files and scratch together) never holds more. Removing the sandbox unmounts it.

Where it may not (an unprivileged server), ``/tmp`` and ``/dev/shm`` are each a tmpfs of
``disk_mb`` made by ``bwrap --size`` (so still kernel-bounded, per exec), and ``/work`` is a
plain host directory: there each file is bounded by ``RLIMIT_FSIZE`` (``file_mb``) and the
total is measured after each exec, so an exec that left more than the quota is reported as
having hit it, but was not stopped while writing.

Either way an exec that found the quota free and left it used up (:meth:`SandboxDisk.is_full`),
or that was refused a write on a full one, reports ``limit: disk_quota`` like the other
limits; a command that only reads a full sandbox does not.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
from functools import cache
from pathlib import Path

#: How the base directories of sandbox pools are named (``<prefix><pid>-<random>``).
POOL_DIR_PREFIX = "rollgym-sandboxes-"
#: The scratch directories: made for each exec (``<name>.<n>``, so concurrent execs of one
#: sandbox never share them) and removed after it, bound at these paths inside.
SCRATCH = {"tmp": "/tmp", "shm": "/dev/shm"}
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
#: A filesystem with less than this free counts as full: a write that failed with ENOSPC
#: leaves at most a partial block behind.
_FULL_SLACK = 64 * 1024


@cache
def _libc() -> ctypes.CDLL:
    """The C library, for ``mount``/``umount2`` (the standard library has neither)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def mount_tmpfs(path: Path, size_bytes: int, uid: int, gid: int) -> None:
    """Mount a tmpfs of ``size_bytes`` at ``path``, its root owned by ``uid``/``gid`` (OSError
    when this process may not mount)."""
    options = f"size={size_bytes},mode=0700,uid={uid},gid={gid}".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(path))


def unmount(path: Path) -> None:
    """Detach the mount at ``path`` (lazily: a process still inside keeps it until it ends)."""
    _libc().umount2(os.fsencode(path), _MNT_DETACH)


def can_mount(base: Path) -> bool:
    """Whether this process may give sandboxes their own tmpfs (tried once, at pool start)."""
    probe = base / "mount-probe"
    probe.mkdir()
    try:
        mount_tmpfs(probe, 1 << 20, os.geteuid(), os.getegid())
    except OSError:
        return False
    else:
        unmount(probe)
        return True
    finally:
        probe.rmdir()


def pool_dir_prefix() -> str:
    """The name a pool's base directory starts with: it carries the server's pid, so a later
    pool can tell the directories of a server that died without cleaning up."""
    return f"{POOL_DIR_PREFIX}{os.getpid()}-"


def sweep_stale(parent: Path) -> int:
    """Unmount and delete the sandbox tmpfs mounts left under ``parent`` by pools whose server
    died without closing them (``kill -9``: a tmpfs outlives its process and holds memory until
    unmounted); how many were removed. A pool calls it at start where it may mount."""
    stale: set[Path] = set()
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            point = Path(line.split()[4].replace("\\040", " "))
            if point.parent.parent == parent and _dead_pool(point.parent.name):
                unmount(point)
                stale.add(point.parent)
    for base in stale:
        shutil.rmtree(base, ignore_errors=True)
    return len(stale)


def _dead_pool(name: str) -> bool:
    if not name.startswith(POOL_DIR_PREFIX):
        return False
    pid = name[len(POOL_DIR_PREFIX) :].split("-", 1)[0]
    return pid.isdigit() and not Path(f"/proc/{pid}").exists()


class SandboxDisk:
    """One sandbox's writable directories under ``root`` (``root/work`` is ``/work``)."""

    def __init__(self, root: Path, quota_bytes: int, owner: tuple[int, int], mounted: bool):
        self.root = root
        self.quota_bytes = quota_bytes
        self.owner = owner
        #: True when ``root`` is the sandbox's own tmpfs of ``quota_bytes``.
        self.mounted = mounted
        self.work = root / "work"

    @classmethod
    def create(
        cls, root: Path, quota_bytes: int, owner: tuple[int, int], mount: bool
    ) -> SandboxDisk:
        """Make the directories (and the tmpfs when ``mount``), owned by the sandbox user."""
        root.mkdir(mode=0o700)
        try:
            if mount:
                mount_tmpfs(root, quota_bytes, *owner)
            else:
                os.chown(root, *owner)
            disk = cls(root, quota_bytes, owner, mount)
            disk._make(disk.work)
        except BaseException:
            if mount:
                unmount(root)
            shutil.rmtree(root, ignore_errors=True)
            raise
        return disk

    def _make(self, path: Path) -> None:
        path.mkdir(mode=0o700)
        os.chown(path, *self.owner)

    def bwrap_options(self, exec_number: int) -> list[str]:
        """How exec ``exec_number`` sees these directories (``bwrap`` options)."""
        options = ["--bind", str(self.work), "/work"]
        for name, inside in SCRATCH.items():
            if self.mounted:
                options += ["--bind", str(self._scratch(name, exec_number)), inside]
            else:
                options += ["--size", str(self.quota_bytes), "--tmpfs", inside]
        return options

    def _scratch(self, name: str, exec_number: int) -> Path:
        return self.root / f"{name}.{exec_number}"

    def make_scratch(self, exec_number: int) -> None:
        """Make exec ``exec_number``'s empty ``/tmp`` and ``/dev/shm`` (on the sandbox's tmpfs;
        without one, ``bwrap`` makes them)."""
        for name in SCRATCH if self.mounted else ():
            self._make(self._scratch(name, exec_number))

    def is_full(self) -> bool:
        """Whether the quota is used up: its filesystem is full, or, without one, the work
        directory holds more than the quota."""
        if self.mounted:
            try:
                stats = os.statvfs(self.root)
            except OSError:
                return False
            return stats.f_bavail * stats.f_frsize < min(_FULL_SLACK, self.quota_bytes // 16)
        return tree_bytes(self.work) > self.quota_bytes

    def drop_scratch(self, exec_number: int) -> None:
        """Remove exec ``exec_number``'s ``/tmp`` and ``/dev/shm`` once it has ended."""
        for name in SCRATCH if self.mounted else ():
            shutil.rmtree(self._scratch(name, exec_number), ignore_errors=True)

    def remove(self) -> None:
        """Delete every file and the tmpfs (blocking; the pool calls it on a worker thread)."""
        if self.mounted:
            unmount(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def tree_bytes(path: Path) -> int:
    """Bytes allocated to the files under ``path`` (symlinks not followed)."""
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in files + dirs:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total
