"""An environment written with OpenEnv runs unchanged as a rollgym environment (``impl: openenv``).

A real OpenEnv environment (``openenv_guess.py``, written with openenv-core) on a real OpenEnv
server on loopback, by URL and by ``module:object``, played end to end by ``rollgym run``
against the simulated model (which reads the tool the environment offers): through the
built-in ``tool_loop`` agent and through the environment's own episode ``/run``. Every OpenEnv
session a rollout opened is counted from the OpenEnv server's side: all closed at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import foreign_support
import pytest
from e2e_support import Job, max_overlap
from foreign_support import RUN, assert_traced
from openenv_support import open_sessions, openenv_server, session_counts
from telemetry_helpers import TracedJob

from server_specs import simulated_model

pytest.importorskip(
    "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
)

pytestmark = pytest.mark.e2e

ROWS = 12


def servers(**where: Any) -> dict[str, Any]:
    """The simulated model, the OpenEnv environment (with its episode ``/run``) and a
    ``tool_loop`` agent on it."""
    return foreign_support.servers("openenv", **where)


def rows(n: int = ROWS) -> list[dict[str, Any]]:
    """Half for the ``tool_loop`` agent, half routed to the environment's own episodes."""
    return foreign_support.half_routed("seed", n)


def assert_played(job: Job, n: int = ROWS) -> None:
    """Each rollout made one schema-valid guess (one step), the reward the observation's."""
    foreign_support.assert_played(job, n, "steps")


def test_an_openenv_server_by_url_plays_end_to_end(job: Job) -> None:
    with openenv_server(job.root / "openenv.log") as url:
        job.write(
            servers(openenv_url=url),
            rows(),
            **RUN,
        )
        proc = job.run(timeout=180)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert_played(job)
        counts = session_counts(url)
        assert counts["opened"] == ROWS and open_sessions(url) == 0, counts


def test_a_session_outlives_slow_model_turns(job: Job) -> None:
    """The OpenEnv server pings its WebSocket sessions (every second here) and drops one whose
    client does not answer: a session idle for a whole model turn (3 s) stays open."""
    with openenv_server(job.root / "openenv.log") as url:
        slow = {**servers(openenv_url=url), "policy": simulated_model(3.0)}
        job.write(slow, rows(4), **RUN)
        proc = job.run(timeout=180)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert_played(job, 4)
        assert open_sessions(url) == 0


@pytest.mark.parametrize("target", ["openenv_guess:app", "openenv_guess:GuessEnvironment"])
def test_an_openenv_app_by_module_object_plays_end_to_end(job: Job, target: str) -> None:
    job.write(servers(openenv_app=target), rows(), **RUN)
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_played(job)


def test_an_mcp_openenv_environment_offers_its_own_tools(job: Job) -> None:
    """An MCP environment's tools are the model's tools (its ``list_tools``), each call one
    ``call_tool`` step; the simulated model calls each once and the reward is the guess's."""
    job.write(
        servers(openenv_app="openenv_tools:app"),
        rows(),
        **RUN,
    )
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == ROWS and job.summary["failed"] == 0, job.failures
    for record in records:
        result = record["result"]
        assert result["tool_calls"] == 2, result  # hint, then guess
        assert result["details"]["rewards"] == [record["reward"]] and record["reward"] in (0.0, 1.0)
        # the model read the tool's own text answer, not OpenEnv's observation envelope
        assert result["answer"].startswith(("Answer: correct", "Answer: wrong")), result


def test_an_openenv_episode_is_traced_and_the_traces_check(tmp_path: Path) -> None:
    """One bounded trace per rollout: the seed (reset), a tool span per step named by the
    environment's own action, the verification; token-captured trajectories; ``rollgym
    traces check`` exits 0."""
    job = TracedJob(tmp_path)
    job.write(
        servers(openenv_app="openenv_guess:app"),
        rows(),
        **RUN,
        trajectories=True,
        capture_tokens=True,
    )
    proc = job.run(timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_played(job)
    assert_traced(job, "GuessAction", "guess")


IN_FLIGHT = 1000
#: Seconds each model turn is held: long enough that all 1,000 rollouts are admitted (each
#: opening its OpenEnv session) before the first finishes.
SLOW_TURN_S = 8.0


def test_1000_rollouts_in_flight_over_one_openenv_server(job: Job) -> None:
    with openenv_server(job.root / "openenv.log") as url:
        many = {**servers(openenv_url=url), "policy": simulated_model(SLOW_TURN_S)}
        job.write(
            many,
            rows(IN_FLIGHT),
            **RUN,
            concurrency=IN_FLIGHT,
            timeout_s=300,
        )
        proc = job.run(timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert_played(job, IN_FLIGHT)
        assert max_overlap(job.rollouts) >= IN_FLIGHT
        counts = session_counts(url)
        assert counts["opened"] == IN_FLIGHT and open_sessions(url) == 0, counts
