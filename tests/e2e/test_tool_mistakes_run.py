"""Forced tool calls whose arguments are not an object, through ``rollgym run``: the rollouts
complete, the mistake is told to the model and kept in the trajectory and the tool span.

The simulated model's ``tool_argument_mistakes`` plays what vLLM's forced tool calls wrote with
a weak model (``true``, ``48116.5``); ``test_real_vllm.py`` has the same check on vLLM itself.
"""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from telemetry_helpers import TracedJob, quick_rows

from rollgym.servers.tools import NOT_AN_OBJECT
from rollgym.telemetry import names
from server_specs import simulated_model, walker_servers

pytestmark = pytest.mark.e2e

FORCED = {"sampling": {"tool_choice": "required"}}


def test_forced_tool_calls_with_non_object_arguments_complete(tmp_path):
    servers = walker_servers(
        model=simulated_model(accuracy=1.0, tool_argument_mistakes=0.5), walker=FORCED, keys=FORCED
    )
    rows = quick_rows(0, 16, 8)
    job = TracedJob(tmp_path).write(
        servers,
        rows,
        agent="walker",
        environment_routes={"keychain_episodes": "keys"},
        trajectories=True,
        max_attempts=1,
    )
    result = job.run()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = job.summary
    assert summary["requested"] == summary["completed"] == len(rows), job.failures[:3]
    assert Counter(r["dispatch_name"] for r in job.rollouts) == {"walker": 16, "keys": 8}
    told = 0
    for line in job.records("trajectories.jsonl"):
        tools = [t for t in line["trajectory"]["turns"] if t["type"] == "tool"]
        assert tools, line["rollout_id"]
        for turn in tools:
            if "error" not in turn:
                continue
            assert turn["error"] == NOT_AN_OBJECT
            written = orjson.loads(turn["arguments"])  # the text the model wrote
            assert written is True or isinstance(written, float), turn
            assert turn["output"].startswith("error: the arguments of tool 'read_key'")
            told += 1
    assert told >= 10  # about half of some 100 tool calls
    spans = job.spans().named(names.SPAN_ENV_TOOL)
    marked = [s for s in spans if names.ENV_TOOL_MODEL_ERROR in s.attributes]
    assert len(marked) == told
    assert {s.attributes[names.ENV_TOOL_MODEL_ERROR] for s in marked} == {NOT_AN_OBJECT}
    assert all(names.ERROR_TYPE not in s.attributes for s in spans)
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr
