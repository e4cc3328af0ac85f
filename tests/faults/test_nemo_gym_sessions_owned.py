"""Every NeMo Gym resource-server session a rollout seeded is closed (``/close_session``),
counted from the resource server's side: a session nobody verifies when it expires, one still
being seeded when its environment shuts down or its rollout is given up, and after ``kill -9`` of the driver and a resume
(the resumed run exact: nothing lost, nothing run twice)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from e2e_support import Job, server_pids_alive, wait_for
from faults_support import assert_exact_accounting
from foreign_support import (
    RUN,
    abandon_rollouts,
    alternately_routed,
    give_up_mid_seed,
    seed_unverified,
    served_urls,
    servers,
    shut_down_mid_seed,
)
from nemo_gym_support import (
    NOTEBOOK,
    PYTHON,
    needs_nemo_gym,
    notebook_rows,
    notebook_server,
    session_counts,
)

from procs import alive as _alive
from rollgym.builtins.envs.nemo_gym import NemoGymEnv

pytestmark = [pytest.mark.e2e, needs_nemo_gym]

ROWS = 60


def _counts(path: Path) -> dict[str, int]:
    try:
        counts: dict[str, int] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"seeded": 0, "closed": 0, "verified": 0, "open": 0}
    return counts


def test_no_session_outlives_kill_9_and_the_resume_is_exact(
    job: Job, monkeypatch: pytest.MonkeyPatch, no_leftover_servers: None
) -> None:
    """rollgym starts the resource server: it dies with the killed driver's servers, the
    sessions it held with it; the resumed run's server seeds and closes exactly the rollouts
    left, each verified once."""
    first = job.root / "counts-1.json"
    monkeypatch.setenv("NOTEBOOK_COUNTS", str(first))
    job.write(
        servers("nemo_gym", 0.3, resources_server=str(NOTEBOOK), python=str(PYTHON)),
        alternately_routed(notebook_rows(ROWS)),
        **RUN,
        concurrency=8,
    )
    proc = job.start()
    try:
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 20, timeout=180)
        # sessions end with their rollouts, not at shutdown: at most one per rollout in flight
        counts = _counts(first)
        assert counts["open"] <= 8 and counts["closed"] >= 20, counts
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done_before = job.line_count("rollouts.jsonl")
    assert done_before < ROWS
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=60)
    pid = _counts(first)["pid"]
    # the resource server went with its rollgym server: nothing holds the sessions open
    assert wait_for(lambda: not _alive(pid), timeout=60), f"resource server {pid} outlived"

    second = job.root / "counts-2.json"
    monkeypatch.setenv("NOTEBOOK_COUNTS", str(second))
    resumed = job.run(timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert_exact_accounting(job, ROWS)
    assert job.summary["failed"] == 0
    counts = _counts(second)
    left = ROWS - done_before
    assert counts["seeded"] == counts["closed"] == counts["verified"] == left, (counts, left)
    assert counts["open"] == 0


def test_an_abandoned_episode_closes_its_session_at_once(
    job: Job, no_leftover_servers: None
) -> None:
    """The environment's own episode ``/run`` whose caller gave up (a timed-out dispatch):
    its handler is cancelled and closes the resource session then, the servers still running
    (no expiry here: a long ``session_ttl_s``)."""
    with notebook_server(job.root / "notebook.log") as url:
        job.write(servers("nemo_gym", 2.0, resources_url=url, session_ttl_s=600), [])
        proc = job.serve()
        try:
            urls = served_urls(proc)
            abandon_rollouts(urls, notebook_rows(4), agent=False)
            assert wait_for(lambda: session_counts(url)["seeded"] == 4, timeout=60)
            assert wait_for(lambda: session_counts(url)["open"] == 0, timeout=60)
            assert session_counts(url)["closed"] == 4 and session_counts(url)["verified"] == 0
            assert len(server_pids_alive(under=str(job.root))) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_a_session_nobody_verifies_is_closed_when_it_expires(
    job: Job, no_leftover_servers: None
) -> None:
    """An agent that seeds a session and goes away: the resource session is closed when the
    rollgym session expires, the servers still running."""
    with notebook_server(job.root / "notebook.log") as url:
        job.write(servers("nemo_gym", resources_url=url, session_ttl_s=2), [])
        proc = job.serve()
        try:
            seed_unverified(served_urls(proc)["guess"], notebook_rows(3))
            assert session_counts(url)["open"] == 3
            assert wait_for(lambda: session_counts(url)["open"] == 0, timeout=60)
            assert session_counts(url)["closed"] == 3
            assert len(server_pids_alive(under=str(job.root))) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def test_a_session_still_being_seeded_at_shutdown_is_closed(job: Job) -> None:
    """The environment shuts down while ``/seed_session`` is still under way (the resource
    server made the session and has not answered its cookie yet): the close waits for the
    seed, then closes the session with its cookie."""
    with notebook_server(job.root / "notebook.log", mode="slow_seed") as url:
        environment = NemoGymEnv.build("nemo", {"resources_url": url})
        assert isinstance(environment, NemoGymEnv)
        shut_down_mid_seed(
            environment, notebook_rows(1)[0], lambda: session_counts(url)["seeded"] == 1
        )
        counts = session_counts(url)
        assert counts["closed"] == 1 and counts["open"] == 0, counts


def test_a_session_whose_rollout_gave_up_while_it_was_seeded_is_closed(job: Job) -> None:
    """The seed is cancelled (its caller gave up) while ``/seed_session`` is still under way:
    the cookie only comes with its answer, so the close waits for it, then closes the session
    the resource server made, the environment still running."""
    with notebook_server(job.root / "notebook.log", mode="slow_seed") as url:
        environment = NemoGymEnv.build("nemo", {"resources_url": url})
        assert isinstance(environment, NemoGymEnv)
        give_up_mid_seed(
            environment,
            notebook_rows(1)[0],
            lambda: session_counts(url)["seeded"] == 1,
            lambda: session_counts(url)["closed"] == 1 and session_counts(url)["open"] == 0,
        )
