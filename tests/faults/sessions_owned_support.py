"""The scenario the foreign environments' session tests share: ``kill -9`` mid-run, resume.

A job whose rollouts each hold a session on a foreign server (OpenEnv, ORS) is killed with
rollouts in flight, then resumed; the foreign server's own count of sessions opened and
closed (``counts``) says none was left open, and the resumed run is exact.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from e2e_support import Job, server_pids_alive, wait_for
from faults_support import assert_exact_accounting


def kill_9_mid_run_and_resume(
    job: Job, rows: int, counts: Callable[[], dict[str, int]], concurrency: int = 8
) -> None:
    """Start the written job, ``kill -9`` its driver once 30 rollouts are done, then resume."""

    def open_now() -> int:
        now = counts()
        return now["opened"] - now["closed"]

    proc = job.start()
    try:
        # killed with rollouts (and so foreign sessions) in flight
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 30, timeout=180)
        # sessions end with their rollouts, not at shutdown: at most one per rollout in
        # flight is open, though many more were opened
        assert open_now() <= concurrency and counts()["opened"] >= 30, counts()
        assert wait_for(lambda: open_now() > 0, timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert job.line_count("rollouts.jsonl") < rows
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    # the environment server died with the driver, and no session it held is left open: it
    # closed them (those it was still creating included), or they ended with its connections
    assert wait_for(lambda: open_now() == 0, timeout=60), counts()

    resumed = job.run(timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert_exact_accounting(job, rows)
    assert job.summary["failed"] == 0
    assert counts()["opened"] >= rows and open_now() == 0, counts()
