"""Every model call an SDK agent makes on a real vLLM is recorded whole: streamed chat with
tool calls, ``n: 2`` with the second choice used, Responses plain and streamed.

vLLM's CPU build serving the tiny local model of ``test_real_vllm.py`` (its ``engine``
fixture: one vLLM for this module), behind the ``openai`` proxy; one job, tokens captured.
Each model turn carries its request id, response id, finish reason (or Responses status) and
usage; the rollout's ``model_s`` counts it; the ``n: 2`` turn keeps both choices and knows the
agent went on with the second; no turn is incomplete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_support import VLLM_MARKS, skip_without_vllm, vllm_servers
from telemetry_helpers import TracedJob, quick_rows
from test_real_vllm import MAX_TOKENS, Engine, engine  # noqa: F401

from server_specs import agent_spec

skip_without_vllm()

pytestmark = VLLM_MARKS


def _servers(engine_url: str) -> dict[str, Any]:
    return vllm_servers(
        engine_url,
        solver=None,
        keys={"kind": "environment", "impl": "keychain", "model": "policy", "max_turns": 4},
        streamer=agent_spec("sdk_agents:StreamingToolAgent", "keys"),
        chooser=agent_spec("sdk_agents:SecondChoiceAgent", "arith"),
        responder=agent_spec("sdk_agents:ResponsesAgent", "arith"),
        blocking=agent_spec("sdk_agents:BlockingResponsesAgent", "arith"),
    )


def _rows() -> list[dict[str, Any]]:
    """Keychain walks for the streamed tool loop, arithmetic for the others."""
    sampling = {"sampling": {"max_tokens": MAX_TOKENS}}
    walks = [{**row, "agent": "streamer", **sampling} for row in quick_rows(0, 4, 0)]
    arith = quick_rows(4, 0, 0)
    others = [
        {**row, "agent": agent, **sampling}
        for row in arith
        for agent in ("chooser", "responder", "blocking")
    ]
    return walks + others


def test_sdk_calls_on_vllm_are_recorded_whole(engine: Engine, tmp_path: Path) -> None:  # noqa: F811
    job = TracedJob(tmp_path)
    job.write(
        _servers(engine.url),
        _rows(),
        telemetry={"preset": "off", "exporter": "none"},
        agent="streamer",
        concurrency=8,
        timeout_s=300,
        max_attempts=1,
        capture_tokens=True,
    )
    result = job.run(timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [f["message"] for f in job.failures] == []
    assert len(job.rollouts) == len(_rows())
    usage = {r["rollout_id"]: r["usage"] for r in job.rollouts}
    results = {r["rollout_id"]: r["result"] for r in job.rollouts}
    for line in job.records("trajectories.jsonl"):
        rollout_id, name = line["rollout_id"], line["dispatch_name"]
        turns = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        assert turns, line
        assert [t["request_id"] for t in turns] == [f"{rollout_id}.{i}" for i in range(len(turns))]
        assert usage[rollout_id]["model_calls"] == len(turns)
        assert usage[rollout_id]["model_s"] > 0
        for turn in turns:
            assert "incomplete" not in turn, turn
            assert turn["finish_reason"] in ("stop", "length", "tool_calls"), turn
            assert turn["usage"]["prompt_tokens"] > 0 and turn["usage"]["completion_tokens"] > 0
            assert turn["response_id"]
        if name in ("responder", "blocking"):
            (turn,) = turns
            assert turn["api"] == "responses" and turn["status"] in ("completed", "incomplete")
            assert turn.get("streamed", False) is (name == "blocking")
        if name == "streamer":
            assert all(t["streamed"] for t in turns)
            assert all(len(t["completion_ids"]) == t["usage"]["completion_tokens"] for t in turns)
        if name == "chooser":
            first, second = turns
            assert first["n"] == 2 and first["chosen"] == 1 and len(first["other_choices"]) == 1
            other = first["other_choices"][0]
            assert other["index"] == 0 and other["completion_ids"] and other["logprobs"]
            assert first["usage"]["completion_tokens"] == len(first["completion_ids"]) + len(
                other["completion_ids"]
            )
            assert first["message"]["content"] == results[rollout_id]["used"]
            assert second["messages_start"] == len(line["trajectory"]["turns"][0]["messages"]) + 1
            # the second prompt holds the first; the tiny model's noise may hold byte tokens
            # that are not valid UTF-8, which come back as other tokens once the text is sent
            # again (the engine's retokenization, recorded as such), so past the first prompt
            # the tokens may differ
            if not second["extends_previous"]:
                assert second["mismatch_at"] >= len(first["prompt_ids"])
