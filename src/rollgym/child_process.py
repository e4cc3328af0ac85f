"""The one way rollgym starts a child process it must not leave behind (servers, trace store).

Every child

- dies with its parent even when the parent is killed with SIGKILL (Linux
  ``PR_SET_PDEATHSIG``): a crashed run never leaves a server or a store behind;
- writes its output to a log file, whose last lines are quoted when it does not come up;
- announces where it listens by writing a ready file atomically
  (:func:`rollgym.files.write_atomically`), which the parent polls for, failing as soon as
  the child exits instead.

On the ground floor: nothing here imports a server or the trace store, and both (through
``placement/`` and ``tracestore/store_process.py``) import this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 20


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once (``prctl`` for parent-death signals and subreapers).

    By glibc's name first: ``find_library`` runs ``ldconfig -p`` in a subprocess (measured:
    the driver ran it just before it started the fork server, and each forked server again)."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc (musl, another system): look it up
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def die_with_parent(
    sig: int = signal.SIGTERM, *, parent: int | None = None
) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when its parent dies (Linux only).

    Servers get SIGTERM (they flush their telemetry on the way out); the trace store SIGKILL.
    ``parent``: the parent's pid when the function is called in the child itself (a worker
    process's initializer) rather than created in the parent (default: this process).
    """
    if not sys.platform.startswith("linux"):
        return None
    c = libc()  # loaded here, in the parent: a forked child only calls into it
    parent = os.getpid() if parent is None else parent

    def preexec() -> None:
        c.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def spawn_child(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    on_parent_death: int = signal.SIGTERM,
    new_session: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its stdout and stderr appended to ``log_path``.

    ``new_session``: run in a session of its own, so a terminal's Ctrl-C reaches only the
    parent (which then stops its children in order). ``pass_fds``: descriptors the child
    inherits under the same numbers (a listening socket bound here).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(command),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(on_parent_death),
            start_new_session=new_session,
            pass_fds=tuple(pass_fds),
        )


def describe_exit(returncode: int | None) -> str:
    """``exit status 3`` / ``killed by SIGKILL (exit status -9)``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name} (exit status {returncode})"
    return f"exit status {returncode}"


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return ""


def read_ready_file(path: Path) -> str | None:
    """The text a child announced in its ready file, or None while there is none yet.

    The child writes it atomically, so a reader never sees half of it.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None
