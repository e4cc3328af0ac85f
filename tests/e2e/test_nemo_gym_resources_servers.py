"""A NeMo Gym resource server runs unchanged as a rollgym environment (``impl: nemo_gym``).

Real nemo-gym (in its own interpreter) on loopback, played end to end by ``rollgym run``
against the simulated model (which reads the tools the row offers), through the built-in
``tool_loop`` agent and through the environment's own episode ``/run``: the weather example
nemo-gym ships, started by rollgym itself; a resource server written from scratch with
nemo-gym's base classes (``nemo_gym_notebook.py``), one the test runs and gives by URL, whose
sessions are counted from its side. One traced run: a span per tool call named by the
resource server's own route, the verification and its reward; ``rollgym traces check`` exits 0.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import Job
from nemo_gym_support import PYTHON, needs_nemo_gym, notebook_rows, notebook_server, session_counts
from telemetry_helpers import TracedJob

from rollgym.telemetry import names
from server_specs import simulated_model

pytestmark = [pytest.mark.e2e, needs_nemo_gym]

ROWS = 12
WEATHER = "resources_servers.example_single_tool_call.app"


def servers(**where: Any) -> dict[str, Any]:
    """The simulated model, the resource server as an environment (with its episode
    ``/run``) and a ``tool_loop`` agent on it."""
    return {
        "policy": simulated_model(),
        "nemo": {"kind": "environment", "impl": "nemo_gym", "model": "policy", **where},
        "player": {"kind": "agent", "impl": "tool_loop", "model": "policy", "environment": "nemo"},
    }


def started(target: str = WEATHER, **extra: Any) -> dict[str, Any]:
    """A resource server rollgym starts in nemo-gym's interpreter."""
    return servers(resources_server=target, python=str(PYTHON), **extra)


def routed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Half for the ``tool_loop`` agent, half routed to the environment's own episodes."""
    half = len(rows) // 2
    return rows[:half] + [
        {**row, "task_id": {"taskset": "nemo", "task_id": str(i)}}
        for i, row in enumerate(rows[half:])
    ]


def weather_rows(n: int) -> list[dict[str, Any]]:
    """The example's own dataset rows (nemo-gym ships them beside the server)."""

    text = subprocess.run(
        [
            str(PYTHON),
            "-c",
            "import resources_servers.example_single_tool_call as m; print(m.__path__[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    lines = (Path(text) / "data" / "example.jsonl").read_bytes().splitlines()
    rows = [orjson.loads(line) for line in lines if line.strip()]
    return [rows[i % len(rows)] for i in range(n)]


RUN = {"agent": "player", "environment_routes": {"nemo": "nemo"}}


def test_a_shipped_example_started_by_rollgym_plays_end_to_end(job: Job) -> None:
    """nemo-gym's weather example: the reward is its verifier's (a get_weather call made)."""
    job.write(started(), routed(weather_rows(ROWS)), **RUN)
    proc = job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == ROWS and job.summary["failed"] == 0, job.failures
    assert {r["dispatch_name"] for r in records} == {"player", "nemo"}
    for record in records:
        result = record["result"]
        assert result["details"]["tool_calls"] == 1, result
        assert "is cold" in result["answer"], result  # the tool's own answer, read by the model
        assert record["reward"] == 1.0


def test_a_resource_server_by_url_plays_end_to_end_and_closes_its_sessions(job: Job) -> None:
    with notebook_server(job.root / "notebook.log") as url:
        job.write(servers(resources_url=url), routed(notebook_rows(ROWS)), **RUN)
        proc = job.run(timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        records = job.rollouts
        assert len(records) == ROWS and job.summary["failed"] == 0, job.failures
        for record in records:
            result = record["result"]
            # note, then reveal; the answer says the secret, which the server's verify read
            # from NeMo Gym's response body
            assert result["details"]["tool_calls"] == 2, result
            assert record["reward"] == 1.0, result
        counts = session_counts(url)
        assert counts == {"seeded": ROWS, "closed": ROWS, "verified": ROWS, "open": 0}, counts


def test_a_wrong_answer_gets_the_resource_servers_zero(job: Job) -> None:
    """The reward is the resource server's: an answer without the secret scores 0."""
    with notebook_server(job.root / "notebook.log") as url:
        wrong = {**servers(resources_url=url), "policy": simulated_model(accuracy=0.0)}
        job.write(wrong, notebook_rows(4), agent="player")
        proc = job.run(timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert [r["reward"] for r in job.rollouts] == [0.0] * 4
        assert session_counts(url)["open"] == 0


def test_a_nemo_gym_episode_is_traced_and_the_traces_check(tmp_path: Path) -> None:
    """One bounded trace per rollout: the seed, a tool span per call named by the resource
    server's route, the verification with its reward; token-captured trajectories; ``rollgym
    traces check`` exits 0."""
    job = TracedJob(tmp_path)
    job.write(
        started(),
        routed(weather_rows(ROWS)),
        **RUN,
        trajectories=True,
        capture_tokens=True,
    )
    proc = job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    spans = job.spans()
    rollout_ids = {r["rollout_id"] for r in job.rollouts}
    assert len(rollout_ids) == ROWS
    for name in (names.SPAN_ENV_SEED, names.SPAN_ENV_TOOL, names.SPAN_VERIFY):
        assert {s.rollout_id for s in spans.named(name)} == rollout_ids, name
    assert {s.attributes[names.ENV_TOOL_NAME] for s in spans.named(names.SPAN_ENV_TOOL)} == {
        "get_weather"
    }
    lines = job.records("trajectories.jsonl")
    assert {t["rollout_id"] for t in lines} == rollout_ids
    for line in lines:
        turns = line["trajectory"]["turns"]
        assert [t["type"] for t in turns if t["type"] != "verify"] == ["model", "tool", "model"]
        assert turns[1]["name"] == "get_weather"
        assert line["trajectory"]["capture"] == "tokens"
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr
