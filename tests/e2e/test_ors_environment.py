"""An environment written with openreward (ORS) runs unchanged as a rollgym environment
(``impl: ors``).

A real ORS environment (``ors_envs/ors_guess.py``, written with openreward, nothing of
rollgym) served by openreward's own ``Server`` on loopback (by URL) and served by rollgym from
``module:object`` in openreward's Python, played end to end by ``rollgym run`` against the
simulated model (which reads the tool the environment offers): through the built-in
``tool_loop`` agent and through the environment's own episode ``/run``. Every ORS session a
rollout opened is counted from the environment's side: all closed at the end. And the trace
contract holds: a span per tool call named after the environment's tool, seed and verify
visible, ``rollgym traces check`` clean.
"""

from __future__ import annotations

from pathlib import Path

import foreign_support
import pytest
from e2e_support import Job, max_overlap, wait_for
from foreign_support import RUN, assert_traced
from ors_support import (
    OrsJob,
    open_sessions,
    ors_server,
    require_openreward,
    rows,
    servers,
    session_counts,
)
from telemetry_helpers import TracedJob

from server_specs import simulated_model

require_openreward()

pytestmark = pytest.mark.e2e

ROWS = 12


@pytest.fixture
def ors_job(tmp_path_factory: pytest.TempPathFactory) -> OrsJob:
    return OrsJob(tmp_path_factory.mktemp("ors"))


def assert_played(job: Job, n: int = ROWS) -> None:
    """Each rollout made one schema-valid guess, the episode finished, the reward the tool's."""
    foreign_support.assert_played(job, n, "tool_calls", finished=True)


def test_an_ors_server_by_url_plays_end_to_end(ors_job: OrsJob) -> None:
    with ors_server(ors_job.root / "ors.log", ors_job.sessions) as url:
        ors_job.write(servers(ors_url=url), rows(ROWS), **RUN)
        proc = ors_job.run(timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert_played(ors_job)
        counts = session_counts(ors_job.sessions)
        assert counts["opened"] == ROWS and open_sessions(ors_job.sessions) == 0, counts


def test_an_ors_environment_served_by_rollgym_plays_end_to_end(ors_job: OrsJob) -> None:
    ors_job.write(servers(ors_environment="ors_guess:Guess"), rows(ROWS), **RUN)
    proc = ors_job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_played(ors_job)
    assert wait_for(lambda: open_sessions(ors_job.sessions) == 0, timeout=30)
    assert session_counts(ors_job.sessions)["opened"] == ROWS


def test_a_terminal_tool_takes_the_final_answer(ors_job: OrsJob) -> None:
    """An environment whose one tool is ``@terminal`` offers the model no tool: the model
    answers in words and verifying hands that answer to the terminal tool, whose reward is
    the rollout's (what openreward's harness does with ``call_terminal_tool``)."""
    ors_job.write(servers(ors_environment="ors_guess:GuessByAnswer"), rows(4), **RUN)
    proc = ors_job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = ors_job.rollouts
    assert len(records) == 4 and ors_job.summary["failed"] == 0, ors_job.failures
    for record in records:
        details = record["result"]["details"]
        assert details["tool_calls"] == 1 and details["finished"] is True, details
        assert record["reward"] == details["rewards"][0] in (0.0, 1.0)
    assert wait_for(lambda: open_sessions(ors_job.sessions) == 0, timeout=30)


def test_an_ors_episode_is_traced_and_the_traces_check(tmp_path: Path) -> None:
    """One bounded trace per rollout: the seed (the ORS session created), a tool span per
    call named by the environment's own tool, the verification; token-captured trajectories;
    ``rollgym traces check`` exits 0."""
    job = TracedJob(tmp_path)
    with ors_server(tmp_path / "ors.log", tmp_path / "sessions.txt") as url:
        job.write(servers(ors_url=url), rows(ROWS), trajectories=True, capture_tokens=True, **RUN)
        proc = job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_played(job)
    assert_traced(job, "guess", "number")


IN_FLIGHT = 1000
#: Seconds each model turn is held: long enough that all 1,000 rollouts are admitted (each
#: opening its ORS session) before the first finishes.
SLOW_TURN_S = 8.0


def test_1000_rollouts_in_flight_over_one_ors_server(ors_job: OrsJob) -> None:
    with ors_server(ors_job.root / "ors.log", ors_job.sessions) as url:
        many = {**servers(ors_url=url), "policy": simulated_model(SLOW_TURN_S)}
        ors_job.write(many, rows(IN_FLIGHT), concurrency=IN_FLIGHT, timeout_s=300, **RUN)
        proc = ors_job.run(timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert_played(ors_job, IN_FLIGHT)
        assert max_overlap(ors_job.rollouts) >= IN_FLIGHT
        counts = session_counts(ors_job.sessions)
        assert counts["opened"] == IN_FLIGHT and open_sessions(ors_job.sessions) == 0, counts
