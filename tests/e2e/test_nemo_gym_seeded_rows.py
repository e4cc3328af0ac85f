"""NeMo Gym rows whose prompt comes from the environment: ``responses_create_params.input: []``.

Environment-driven rows of NeMo Gym's datasets carry an empty ``input``; the environment's
seed supplies the conversation (and here the tools). Played by the ``nemo_gym_row`` agent
against the simulated model: they run and are solved, with the request's own parameters
(``temperature``, ``max_output_tokens``) still applied; a row with an empty input and no
``instructions`` whose seed has a prompt is not refused.
"""

from __future__ import annotations

import pytest
from e2e_support import Job

from server_specs import nemo_row_servers

pytestmark = pytest.mark.e2e


def test_rows_with_an_empty_input_start_from_the_seeded_prompt(job: Job) -> None:
    vault = {"type": "responses_api_agents", "name": "vault_agent"}
    math = {"type": "responses_api_agents", "name": "math_simple_agent"}
    rows = [
        {
            "responses_create_params": {"input": [], "temperature": 0.5, "max_output_tokens": 64},
            "seed": seed,
            "hops": 2,
            "agent_ref": vault,
        }
        for seed in range(3)
    ] + [
        {
            "responses_create_params": {"input": [], "instructions": "Be brief."},
            "question": f"{a} + 5",
            "agent_ref": math,
        }
        for a in range(3)
    ]
    servers = nemo_row_servers()
    job.write(servers, rows, agent="nemo", trajectories=True)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert job.failures == []
    rollouts = {r["task_index"]: r for r in job.rollouts}
    assert sorted(rollouts) == list(range(6))
    assert all(r["reward"] == 1.0 for r in rollouts.values())
    assert all(rollouts[i]["result"]["tool_calls"] == 2 for i in range(3))  # seeded tools used
    lines = {line["task_index"]: line for line in job.records("trajectories.jsonl")}
    first = [t for t in lines[0]["trajectory"]["turns"] if t["type"] == "model"][0]
    assert first["params"]["temperature"] == 0.5 and first["params"]["max_tokens"] == 64
    assert "Start key:" in str(first["messages"])  # the seed's prompt, not the row's
    math_turn = [t for t in lines[3]["trajectory"]["turns"] if t["type"] == "model"][0]
    assert math_turn["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "Compute: 0 + 5" in str(math_turn["messages"][1:])
