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

import pytest
from e2e_support import Job, wait_for
from ors_support import (
    OrsJob,
    open_sessions,
    ors_server,
    require_openreward,
    rows,
    servers,
    session_counts,
)

require_openreward()

pytestmark = pytest.mark.e2e

ROWS = 12
RUN = {"agent": "player", "environment_routes": {"guesses": "guess"}}


@pytest.fixture
def ors_job(tmp_path_factory: pytest.TempPathFactory) -> OrsJob:
    return OrsJob(tmp_path_factory.mktemp("ors"))


def assert_played(job: Job, n: int = ROWS) -> None:
    records = job.rollouts
    assert len(records) == n and job.summary["failed"] == 0, job.failures
    assert {r["dispatch_name"] for r in records} == {"player", "guess"}
    for record in records:
        details = record["result"]["details"]
        # the simulated model made one schema-valid guess; the reward is the tool's
        assert details["tool_calls"] == 1 and len(details["rewards"]) == 1, details
        assert details["finished"] is True
        assert record["reward"] == details["rewards"][0] in (0.0, 1.0)


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
