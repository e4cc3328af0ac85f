"""Every ORS session a rollout opened is closed, counted from the environment's side (its
instances created and torn down): as each rollout ends, for rollouts whose caller gave up, for
a session nobody verifies, and after ``kill -9`` of the driver and a resume (the resumed run
exact: nothing lost, nothing run twice)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from e2e_support import server_pids_alive, wait_for
from foreign_support import (
    RUN,
    abandon_rollouts,
    alternately_routed,
    give_up_mid_seed,
    seed_unverified,
    served_urls,
    servers,
)
from ors_support import OrsJob, open_sessions, ors_server, require_openreward, session_counts
from sessions_owned_support import kill_9_mid_run_and_resume

from rollgym.builtins.envs.ors import OrsEnv

require_openreward()

pytestmark = pytest.mark.e2e

ROWS = 80


@pytest.fixture
def ors_job(tmp_path: Path) -> OrsJob:
    return OrsJob(tmp_path)


def test_no_session_leaks_after_kill_9_and_resume(
    ors_job: OrsJob, no_leftover_servers: None
) -> None:
    job = ors_job
    with ors_server(job.root / "ors.log", job.sessions) as url:
        job.write(
            servers("ors", 0.3, ors_url=url),
            alternately_routed([{"index": i} for i in range(ROWS)]),
            **RUN,
            concurrency=8,
        )
        kill_9_mid_run_and_resume(job, ROWS, lambda: session_counts(job.sessions))


def test_sessions_of_abandoned_rollouts_close_while_the_servers_run(
    ors_job: OrsJob, no_leftover_servers: None
) -> None:
    """Rollouts whose caller gave up (a timed-out dispatch) end their sessions, counted while
    the servers keep running, so not by a shutdown: an episode's at once (its handler is
    cancelled and closes it), an agent's by the session's expiry (a short ``session_ttl_s``);
    and a session seeded and never verified is closed when it expires."""
    job = ors_job
    with ors_server(job.root / "ors.log", job.sessions) as url:
        job.write(servers("ors", 2.0, ors_url=url, session_ttl_s=4.0), [])
        proc = job.serve()
        try:
            urls = served_urls(proc)
            abandon_rollouts(urls, [{"index": i} for i in range(4)])
            seed_unverified(urls["guess"], [{"index": i} for i in range(3)])
            assert wait_for(lambda: session_counts(job.sessions)["opened"] == 11, timeout=60)
            assert wait_for(lambda: open_sessions(job.sessions) == 0, timeout=60), session_counts(
                job.sessions
            )
            assert len(server_pids_alive(under=str(job.root))) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_a_session_whose_rollout_gave_up_while_it_was_made_is_closed(ors_job: OrsJob) -> None:
    """The seed is cancelled (its caller gave up) while openreward is still making the session
    (a constructor that takes 2 s): openreward's ``/delete`` of a session still in ``/create``
    does nothing, so the close waits for ``/create``'s answer and the instance it made is torn
    down, the environment still running."""
    job = ors_job
    with ors_server(job.root / "ors.log", job.sessions, mode="slow_create") as url:
        environment = OrsEnv.build("guess", {"ors_url": url})
        assert isinstance(environment, OrsEnv)
        give_up_mid_seed(
            environment,
            {"index": 1},
            lambda: session_counts(job.sessions)["opened"] == 1,
            lambda: session_counts(job.sessions) == {"opened": 1, "closed": 1},
        )
