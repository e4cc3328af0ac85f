"""The viewer's text search over a run's files: where a text is, case-insensitive, bounded."""

from __future__ import annotations

from pathlib import Path

import orjson

from rollgym.reading.text_search import search_run


def _trajectory(rollout_id: str, user: str, tool: str, output: str) -> dict[str, object]:
    return {
        "rollout_id": rollout_id,
        "trajectory": {
            "version": 1,
            "turns": [
                {
                    "type": "model",
                    "call": 0,
                    "messages_start": 0,
                    "messages": [{"role": "user", "content": user}],
                    "message": {"role": "assistant", "content": "Answer: 4"},
                },
                {"type": "tool", "name": tool, "arguments": {"key": "k-1"}, "output": output},
                {"type": "verify", "answer": "Answer: 4", "reward": 1.0},
            ],
        },
    }


def _run(tmp_path: Path, n: int = 3) -> Path:
    lines = [
        orjson.dumps(_trajectory(f"{i}-0", f"Compute {i} + 1", "read_key", "next key: k-9"))
        for i in range(n)
    ]
    (tmp_path / "trajectories.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    failure = {"rollout_id": "9-0", "error_kind": "http_5xx", "message": "agent 'x' failed: Boom"}
    bad = {"rollout_id": None, "line": 4, "error_kind": "invalid_row", "message": "rows:4: Boom"}
    (tmp_path / "failures.jsonl").write_bytes(
        orjson.dumps(failure) + b"\n" + orjson.dumps(bad) + b"\n"
    )
    return tmp_path


def test_messages_tools_and_errors_are_found_where_they_are(tmp_path: Path) -> None:
    run = _run(tmp_path)
    found = search_run(run, None, "COMPUTE 1")["hits"]
    assert found == [{"rollout_id": "1-0", "where": "user", "snippet": "Compute 1 + 1"}]
    tools = search_run(run, None, "read_KEY")["hits"]
    assert isinstance(tools, list)
    assert {(h["rollout_id"], h["where"]) for h in tools} == {
        (f"{i}-0", "tool call") for i in range(3)
    }
    outputs = search_run(run, None, "next key")["hits"]
    assert isinstance(outputs, list) and {h["where"] for h in outputs} == {"tool output"}
    errors = search_run(run, None, "boom")["hits"]
    assert errors == [
        {"rollout_id": "9-0", "where": "error", "snippet": "http_5xx: agent 'x' failed: Boom"},
        {"rollout_id": "input line 4", "where": "error", "snippet": "invalid_row: rows:4: Boom"},
    ]
    assert search_run(run, None, "nobody said this")["hits"] == []


def test_a_search_stops_at_its_limit_and_its_byte_budget(tmp_path: Path) -> None:
    run = _run(tmp_path, n=20)
    limited = search_run(run, None, "compute", limit=5)
    assert len(limited["hits"]) == 5 and limited["full"] is True  # type: ignore[arg-type]
    line = len((run / "trajectories.jsonl").read_bytes().splitlines()[0]) + 1
    short = search_run(run, None, "compute", max_bytes=3 * line)
    assert len(short["hits"]) == 3 and short["truncated"] is True  # type: ignore[arg-type]
