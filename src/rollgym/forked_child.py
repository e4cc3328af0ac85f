"""Children made by ``fork()`` without ``exec``: the part of :class:`subprocess.Popen` rollgym
uses, for a process that already holds the modules its child needs.

A new interpreter imports its stack again (0.1-0.2 s of CPU for a span exporter, 1.5 s for a
server); a fork shares the parent's imported modules and starts in about a millisecond. Two
users: the fork server's servers (adopted by the driver, :mod:`rollgym.placement.forked`) and
each process's span-exporter child (:func:`fork_piped`, from
:mod:`rollgym.telemetry.pipeline.child`).

Forking is safe only in a process that runs one thread (a fork copies other threads' locks
half-held), so :func:`fork_piped` refuses (None: spawn instead) when another thread runs, off
Linux, and with ``ROLLGYM_FORK_SERVER=0``, the switch that spawns every child as before.

On the ground floor: imports nothing of rollgym.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import BinaryIO

from rollgym.environment_variables import ROLLGYM_FORK_SERVER

ENV_FORK_SERVER = ROLLGYM_FORK_SERVER
_WAIT_POLL_S = 0.01
#: Signals whose handlers a forked child resets (the parent's Python handlers would run there).
_RESET_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGCHLD,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
)


def forking_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Linux, unless ``ROLLGYM_FORK_SERVER=0``."""
    return sys.platform.startswith("linux") and environ.get(ENV_FORK_SERVER, "1") != "0"


def can_fork() -> bool:
    """Whether :func:`fork_piped` would fork now (forking on, one thread running)."""
    return forking_enabled() and threading.active_count() == 1


class ForkedChild:
    """A forked process (ours, or one we will adopt): ``pid``, ``poll``, ``send_signal``,
    ``kill``, ``wait`` as :class:`subprocess.Popen` has them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """None while it runs (or is not adopted yet), else its exit code (-N: signal N)."""
        if self.returncode is not None:
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not (yet) ours: the fork server still runs, or it is gone
            if not _exists(self.pid):
                self.returncode = -1
            return self.returncode
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(_WAIT_POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie of ours exists until reaped; one of the fork server's until it is adopted
    return True


class PipedChild(ForkedChild):
    """A forked child whose stdin and stdout are pipes to this process (``Popen`` with
    ``stdin=PIPE, stdout=PIPE``)."""

    def __init__(self, pid: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        super().__init__(pid)
        self.stdin: BinaryIO | None = stdin
        self.stdout: BinaryIO | None = stdout


def fork_piped(run: Callable[[BinaryIO, BinaryIO], None]) -> PipedChild | None:
    """Fork a child that calls ``run(stdin, stdout)`` and exits (0, or 1 when it raised).

    The child keeps only its two pipes and stderr (as ``close_fds=True`` would): a server's
    listening socket or a log it holds is not kept open by its exporter. None, with nothing
    started, where forking is off or unsafe (another thread runs): spawn instead.
    """
    if not can_fork():
        return None
    child_in, parent_in = os.pipe()
    parent_out, child_out = os.pipe()
    with contextlib.suppress(Exception):  # the child must not write the parent's buffers again
        sys.stdout.flush()
        sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its behaviour is tested through its output)
        _run_child(child_in, child_out, run)
    os.close(child_in)
    os.close(child_out)
    return PipedChild(pid, os.fdopen(parent_in, "wb"), os.fdopen(parent_out, "rb"))


def _run_child(child_in: int, child_out: int, run: Callable[[BinaryIO, BinaryIO], None]) -> None:
    code = 1
    try:
        gc.freeze()  # the parent's objects stay as they are: never scanned, never collected here
        os.dup2(child_in, 0)
        os.dup2(child_out, 1)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # close_range(2) where the kernel has it
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        # The parent's event loop may have set a wakeup descriptor, closed just above: left
        # set, every signal here would print "Exception ignored ... Bad file descriptor".
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        run(os.fdopen(0, "rb"), os.fdopen(1, "wb"))
        code = 0
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
