"""Every OpenEnv session a rollout opened is closed, counted from the OpenEnv server's side:
as each rollout ends, for rollouts whose caller gave up, for a session nobody verifies, for one
still being made when its environment shuts down, and after ``kill -9`` of the driver and a
resume (the resumed run exact: nothing lost, nothing run twice)."""

from __future__ import annotations

import signal

import pytest
from e2e_support import Job, server_pids_alive, wait_for
from foreign_support import (
    RUN,
    abandon_rollouts,
    alternately_routed,
    seed_unverified,
    served_urls,
    servers,
    shut_down_mid_seed,
)
from openenv_support import open_sessions, openenv_server, session_counts
from sessions_owned_support import kill_9_mid_run_and_resume

from rollgym.builtins.envs.openenv import OpenEnvEnv

pytest.importorskip(
    "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
)

pytestmark = pytest.mark.e2e

ROWS = 80


def test_sessions_of_abandoned_rollouts_close_while_the_servers_run(
    job: Job, no_leftover_servers: None
) -> None:
    """Rollouts whose caller gave up (a timed-out dispatch) end their sessions, counted while
    the servers keep running, so not by a shutdown: an episode's at once (its handler is
    cancelled and closes it), an agent's by the session's expiry (the agent is cancelled
    with its caller and never verifies; a short ``session_ttl_s`` here)."""
    with openenv_server(job.root / "openenv.log") as url:
        job.write(servers("openenv", 2.0, openenv_url=url, session_ttl_s=4.0), [])
        proc = job.serve()
        try:
            urls = served_urls(proc)
            abandon_rollouts(urls, [{"seed": i} for i in range(4)])
            assert wait_for(lambda: session_counts(url)["opened"] == 8, timeout=60)
            assert wait_for(lambda: open_sessions(url) == 0, timeout=60), session_counts(url)
            assert len(server_pids_alive(under=str(job.root))) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_no_session_leaks_after_kill_9_and_resume(job: Job, no_leftover_servers: None) -> None:
    with openenv_server(job.root / "openenv.log") as url:
        job.write(
            servers("openenv", 0.3, openenv_url=url),
            alternately_routed([{"seed": i} for i in range(ROWS)]),
            **RUN,
            concurrency=8,
        )
        kill_9_mid_run_and_resume(job, ROWS, lambda: session_counts(url))


def test_a_session_nobody_verifies_is_closed_when_it_expires(
    job: Job, no_leftover_servers: None
) -> None:
    """An agent that seeds a session and goes away (its rollout failed before verifying):
    the OpenEnv session ends when the rollgym session expires, the servers still running."""
    with openenv_server(job.root / "openenv.log") as url:
        job.write(servers("openenv", openenv_url=url, session_ttl_s=2), [])
        proc = job.serve()
        try:
            urls = served_urls(proc)
            seed_unverified(urls["guess"], [{"seed": i} for i in range(3)])
            assert open_sessions(url) == 3
            assert wait_for(lambda: open_sessions(url) == 0, timeout=60), session_counts(url)
            assert len(server_pids_alive(under=str(job.root))) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_a_session_still_being_made_at_shutdown_is_closed(job: Job) -> None:
    """The environment shuts down while a session's ``reset`` is still under way on the
    OpenEnv server: the session is closed (its connection made, the close waits for nothing
    more). A connection dropped would end it too: what this shows is that the shutdown owns
    it, as the NeMo Gym and ORS ones, whose servers end nothing by themselves."""
    with openenv_server(job.root / "openenv.log", mode="slow_reset") as url:
        environment = OpenEnvEnv.build("guess", {"openenv_url": url})
        assert isinstance(environment, OpenEnvEnv)
        shut_down_mid_seed(environment, {"seed": 1}, lambda: session_counts(url)["opened"] == 1)
        # the server counts a session closed once it has ended it, just after the connection
        assert wait_for(lambda: session_counts(url) == {"opened": 1, "closed": 1}, timeout=30)
