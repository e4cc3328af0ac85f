"""A child that waits, before its imports, until this process's servers are up.

Why: on the two cores of a small machine a run's start-up is three processes importing at
once: the driver, the servers' fork server (about 1 s of CPU, which every server waits for)
and the trace store (about 0.6 s of CPU, then its decoder and writer workers, 0.35 s), which
no server waits for: its socket is bound by the driver, so connections made before it serves
wait in the socket's backlog and the spans in their exporters' queues. Sharing the cores
three ways made the fork server, the one the servers wait for, take half as long again.

So while a fork server of this process imports (:func:`hold`, from the fork server's start
to its :meth:`~rollgym.placement.forked.ForkServer.finish`), a child started through
:func:`gated_command` is spawned at once (its pid is known and watched; it dies with its
parent as any child does) but runs ``python -m rollgym.start_gate FD MODULE ARGS...``: it
waits until every hold is released (the write ends of its pipe are closed), at most
:data:`MAX_WAIT_S`, and then runs ``MODULE`` as ``python -m MODULE ARGS...`` would. The
launch holds too, until every server answered ``/health``
(:func:`rollgym.placement.launcher.launch_servers`), so such a child starts once the servers
are up: their own start-up (an app each, the first ``GET /health``) has the cores as well. A
child started when nothing holds (no fork server: Ray, ``ROLLGYM_FORK_SERVER=0``) runs at
once. The trace store is its one user
(:func:`rollgym.tracestore.store_process.start_trace_store`).

On the ground floor: imports nothing of rollgym.
"""

from __future__ import annotations

import os
import runpy
import select
import sys
import threading

#: The longest a gated child waits: a hold never released (a bug, a hung launch) delays the
#: child by this much at most, never for good.
MAX_WAIT_S = 10.0
#: ``python -m`` this module: the gated child's entry point.
MODULE = "rollgym.start_gate"

_lock = threading.Lock()
_holds = 0
#: The write ends of the pipes gated children wait on; closed when the last hold goes.
_writers: list[int] = []


def hold() -> None:
    """Children started from now on wait until a matching :func:`release`."""
    global _holds
    with _lock:
        _holds += 1


def release() -> None:
    """End one hold; after the last one every waiting child goes on."""
    global _holds
    with _lock:
        _holds = max(0, _holds - 1)
        if _holds:
            return
        writers = list(_writers)
        _writers.clear()
    for fd in writers:
        os.close(fd)


def gate() -> int | None:
    """The read end of a pipe for one child to wait on (pass it to the child, then close this
    process's copy), or None when nothing holds: the child need not wait."""
    with _lock:
        if not _holds:
            return None
        read_end, write_end = os.pipe()
        _writers.append(write_end)
    return read_end


def gated_command(fd: int, module: str, args: list[str]) -> list[str]:
    """``python -m module args...``, run once the gate ``fd`` opens."""
    return [sys.executable, "-m", MODULE, str(fd), module, *args]


def _main(argv: list[str]) -> None:
    fd, module, args = int(argv[1]), argv[2], argv[3:]
    select.select([fd], [], [], MAX_WAIT_S)  # readable at EOF: every write end was closed
    os.close(fd)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main(sys.argv)
