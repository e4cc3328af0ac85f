"""Profile every Python process of a run (``bench/profile_processes.py`` puts this on PYTHONPATH).

Where ``ROLLGYM_BENCH_PROFILE_DIR`` is set, each interpreter that starts runs cProfile on its
main thread, timed by that thread's CPU clock, and writes ``<dir>/<pid>.prof`` plus ``<pid>.cmd`` (its command line and server
name) when it exits normally (atexit: rollgym's servers, store and driver all return from
SIGTERM). A process forked from a profiled one (the fork server's servers) starts a profile
of its own, and ``os._exit`` (how a forked server ends) writes it first. Threads other than the main one are not profiled (the store's writer thread, the
span pipeline's writer): the figures say so. Not part of rollgym; a benchmark's tool only.
"""

from __future__ import annotations

import os

_DIR = os.environ.get("ROLLGYM_BENCH_PROFILE_DIR")

if _DIR:
    import atexit
    import cProfile
    import json
    import sys
    import time

    # CPU time of the main thread, not wall time: a blocked read must not count as work.
    _profile = cProfile.Profile(time.thread_time)

    def _dump() -> None:
        _profile.disable()
        pid = os.getpid()
        _profile.dump_stats(os.path.join(_DIR, f"{pid}.prof"))
        spec = os.environ.get("_ROLLGYM_SERVER_SPEC", "")
        name = ""
        if spec:
            try:
                name = str(json.loads(spec).get("name", ""))
            except ValueError:
                name = ""
        with open(os.path.join(_DIR, f"{pid}.cmd"), "w") as out:
            json.dump({"argv": sys.argv, "orig_argv": sys.orig_argv, "server": name}, out)

    def _fresh_profile() -> None:
        """In a forked child: drop the parent's figures, profile this process alone."""
        global _profile
        _profile.disable()
        _profile = cProfile.Profile(time.thread_time)
        _profile.enable()

    _exit = os._exit

    def _dump_and_exit(code: int) -> None:
        _dump()
        _exit(code)

    atexit.register(_dump)
    os.register_at_fork(after_in_child=_fresh_profile)
    os._exit = _dump_and_exit  # type: ignore[assignment]
    _profile.enable()
