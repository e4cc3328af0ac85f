"""A rollout you can read: the conversation in the terminal, and text in the Parquet export.

Real servers (the simulated model, the keychain environment, the tool-loop agent) write a run
with trajectories; the conversation and the export are read back and compared with the
trajectory lines the run wrote, rebuilt here independently of the code under test.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from e2e_support import Job, agent

from server_specs import walker_servers

pytestmark = pytest.mark.e2e

SERVERS = walker_servers(broken=agent("agents:AlwaysFailAgent"))


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"seed": seed, "hops": 1 + seed % 3} for seed in range(6)]
    for row in rows[::2]:
        row["sampling"] = {"temperature": 0.5, "max_tokens": 64}
    rows.append({"agent": "broken", "q": "never answered"})
    return rows


def _rebuilt(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for turn in trajectory["turns"]:
        if turn["type"] == "model":
            history = [*history[: turn["messages_start"]], *turn["messages"], turn["message"]]
    return history


@pytest.fixture
def finished(job: Job) -> Job:
    job.write(SERVERS, _rows(), agent="walker", trajectories=True, max_attempts=2)
    done = job.run(timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return job


def test_conversation_in_the_terminal(finished: Job) -> None:
    job = finished
    line = next(t for t in job.records("trajectories.jsonl") if t["task_index"] == 2)
    shown = job.cli("traces", "show", str(job.out), "2-0", "--conversation")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.splitlines()[0].startswith("2-0 dispatch=walker outcome=ok reward=")
    tools = [turn for turn in line["trajectory"]["turns"] if turn["type"] == "tool"]
    assert tools, "a keychain walk calls its tool"
    for turn in tools:
        assert f"tool {turn['name']}(" in text
        assert turn["output"] in text
    models = [turn for turn in line["trajectory"]["turns"] if turn["type"] == "model"]
    for turn in models:
        usage = turn["usage"]
        assert (
            f"call {turn['call']}: {usage['prompt_tokens']} tokens in, "
            f"{usage['completion_tokens']} out" in text
        )
    verify = next(turn for turn in line["trajectory"]["turns"] if turn["type"] == "verify")
    assert f"reward={verify['reward']:.3f}" in text

    as_json = job.cli("traces", "show", str(job.out), "2-0", "--conversation", "--json")
    view = orjson.loads(as_json.stdout)
    kinds = [entry["kind"] for entry in view["conversation"]]
    assert kinds[:2] == ["message", "message"] and kinds[-1] == "verify"
    assert kinds.count("answer") == len(models) and kinds.count("tool") == len(tools)


def test_a_failed_rollout_says_why_at_the_top(finished: Job) -> None:
    job = finished
    (failure,) = job.failures
    shown = job.cli("traces", "show", str(job.out), "6-0", "--conversation")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1] == f"failed: {failure['error_kind']}: {failure['message']}"
    # the run records trajectories: the hint says so instead of asking to turn them on
    assert "no turn recorded for this rollout" in shown.stdout
    assert "the run records trajectories" in shown.stdout
    assert "run.trajectories=true" not in shown.stdout
    missing = job.cli("traces", "show", str(job.out), "99-0", "--conversation")
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith(
        "no rollout '99-0' in its rollouts.jsonl or failures.jsonl"
    )


def test_export_carries_the_text(finished: Job) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    job = finished
    out = job.root / "table.parquet"
    exported = job.cli("export", str(job.out), "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    rows = {row["rollout_id"]: row for row in pq.read_table(out).to_pylist()}
    lines = {line["rollout_id"]: line for line in job.records("trajectories.jsonl")}
    run_id = orjson.loads((job.out / "run.json").read_bytes())["run_id"]
    assert rows.keys() == lines.keys() and len(rows) == 6
    for rollout_id, row in rows.items():
        trajectory = lines[rollout_id]["trajectory"]
        whole = _rebuilt(trajectory)
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in whole]
        assert [m["content"] for m in row["messages"]] == [m.get("content") for m in whole]
        for exported_message, message in zip(row["messages"], whole, strict=True):
            calls = message.get("tool_calls")
            assert exported_message["tool_calls"] == (
                orjson.dumps(calls).decode() if calls else None
            )
        assert row["completion_text"] == whole[-1]["content"]
        assert row["finish_reason"] == "stop" and row["truncated"] is False
        assert row["run_id"] == run_id
        assert row["model"] == "rollgym-simulated"  # the name the engine answers with
        assert row["has_tokens"] is False and row["prefix_ok"] is None
        asked = row["task_index"] % 2 == 0
        assert row["temperature"] == (0.5 if asked else None)
        assert row["max_tokens"] == (64 if asked else None)
        assert orjson.loads(row["sampling"]) == (
            {"max_tokens": 64, "temperature": 0.5} if asked else {}
        )

    datasets = pytest.importorskip("datasets")
    table = datasets.load_dataset("parquet", data_files=str(out), split="train")
    assert table.num_rows == 6
    first = table[0]
    assert first["messages"][0]["role"] == "system"
    assert isinstance(first["completion_text"], str) and first["run_id"] == run_id
