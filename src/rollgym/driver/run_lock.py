"""One run at a time in an output directory: an ``flock`` on ``<output_dir>/run.lock``.

Two sessions appending to the same ``rollouts.jsonl`` would each run every rollout the other
is running (the ledger is read once, at start), so the second one is refused before it writes
anything. The lock is the kernel's (``fcntl.flock`` on an open file, held for as long as the
run holds the file): a run that dies, even by ``kill -9``, releases it with its last file
descriptor, so a stale lock cannot exist and nothing has to be cleaned up by hand. The file
itself stays; its content (pid, host, start time) only makes the refusal say who holds it.

The same call proves the folder usable: it is created and written first, so a read-only or
impossible ``run.output_dir`` is one line naming it, before anything else is touched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

import orjson

from rollgym.errors import ConfigError, RunDirBusy

LOCK_FILE = "run.lock"


class RunLock:
    """Holds ``<output_dir>/run.lock`` from :meth:`acquire` until :meth:`release` (or death)."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.path = output_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`RunDirBusy` (another run holds it) or
        :class:`ConfigError` naming ``run.output_dir`` (the folder cannot be used)."""
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise unusable(self.output_dir, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirBusy(self.output_dir, holder) from None
            raise unusable(self.output_dir, exc) from None
        self._fd = fd
        try:
            _write_holder(fd)
            _probe_writable(self.output_dir)
        except OSError as exc:
            self.release()
            raise unusable(self.output_dir, exc) from None
        return self

    def release(self) -> None:
        """Let the next run in (closing the file releases the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_usable(output_dir: Path) -> None:
    """Take the lock and let it go at once: the CLI refuses an unusable or busy
    ``run.output_dir`` in one line before it imports the rest of the driver (1.5 s for a
    one-line error, measured, before this check); the run takes the lock for good later."""
    RunLock(output_dir).acquire().release()


def unusable(output_dir: Path, exc: OSError) -> ConfigError:
    """The one line for an output directory that cannot be created or written."""
    reason = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(output_dir) else ""
    return ConfigError(
        f"cannot write the output directory {output_dir}: {reason}{where}; "
        "give a writable run.output_dir",
        key_path="run.output_dir",
    )


def _write_holder(fd: int) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    data = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> dict[str, object]:
    with contextlib.suppress(OSError, orjson.JSONDecodeError):
        holder = orjson.loads(os.pread(fd, 4096, 0))
        if isinstance(holder, dict):
            return holder
    return {}


def _probe_writable(output_dir: Path) -> None:
    """Create and remove a file: a folder whose files are writable but which is not itself
    (``chmod a-w``) would otherwise fail later, at the first atomic rewrite."""
    probe = output_dir / f".write-probe-{os.getpid()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.unlink(probe)
