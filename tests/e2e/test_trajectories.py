"""Trajectories end to end: real servers, the simulated engine's tokens, resume, export.

The simulated model's tokenizer is deterministic, so the test recomputes, from the messages
the trajectory recorded, the exact token sequence the engine saw and generated, and compares
it with what the engine answered (which the recorder stored, never recomputed).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import orjson
import pytest
from e2e_support import Job, server_pids_alive, wait_for

from rollgym.builtins.models import toy_tokenizer
from rollgym.trajectory.tokens import token_sequence
from server_specs import nemo_row_servers, simulated_model, walker_servers

pytestmark = pytest.mark.e2e

FAST = {"kind": "fixed", "seconds": 0.0}


def _servers(latency: dict[str, Any] = FAST, **walker: Any) -> dict[str, Any]:
    return walker_servers(model=simulated_model(accuracy=0.7, latency=latency), walker=walker)


def _keychain_rows(count: int) -> list[dict[str, Any]]:
    return [{"seed": seed, "hops": 1 + seed % 4} for seed in range(count)]


def _by_rollout(job: Job) -> dict[str, dict[str, Any]]:
    lines = job.records("trajectories.jsonl")
    assert len(lines) == len({line["rollout_id"] for line in lines}), "a trajectory twice"
    return {line["rollout_id"]: line for line in lines}


def _conversation(trajectory: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """The whole conversation (the last request's messages and its answer), rebuilt from the
    recorded deltas: each turn's messages continue the previous request + answer from
    ``messages_start``."""
    history: list[dict[str, Any]] = []
    tools = None
    for turn in trajectory["turns"]:
        if turn["type"] == "model":
            history = [*history[: turn["messages_start"]], *turn["messages"], turn["message"]]
            tools = turn.get("tools", tools)
    return history, tools


def _check_tokens(line: dict[str, Any]) -> None:
    trajectory = line["trajectory"]
    assert trajectory["capture"] == "tokens" and trajectory["prefix_ok"] is True
    sequence = token_sequence(trajectory)
    assert sequence is not None and sequence.prefix_ok
    conversation, tools = _conversation(trajectory)
    # the engine's own tokens of the whole conversation, recomputed independently
    expected = [
        toy_tokenizer.token_id(p) for p in toy_tokenizer.prompt_pieces(conversation[:-1], tools)
    ] + [toy_tokenizer.token_id(p) for p in toy_tokenizer.body_pieces(conversation[-1])]
    assert sequence.prompt_ids + sequence.completion_ids == expected
    # the loss mask covers exactly the generated tokens, in order, with their logprobs
    model_turns = [t for t in trajectory["turns"] if t["type"] == "model"]
    generated = [i for t in model_turns for i in t["completion_ids"]]
    masked = [i for i, m in zip(sequence.completion_ids, sequence.loss_mask, strict=True) if m]
    assert masked == generated and sum(sequence.loss_mask) == len(generated)
    logprobs = [lp for lp, m in zip(sequence.logprobs, sequence.loss_mask, strict=True) if m]
    assert logprobs == [lp for t in model_turns for lp in t["logprobs"]]
    assert all(lp < 0 for lp in logprobs)
    assert all(
        lp == 0.0 for lp, m in zip(sequence.logprobs, sequence.loss_mask, strict=True) if not m
    )
    # usage agrees with the ids: the last call saw the whole sequence but its completion
    last = model_turns[-1]["usage"]
    assert last["prompt_tokens"] + last["completion_tokens"] == len(expected)
    for turn in model_turns[1:]:
        assert turn["extends_previous"] is True


def test_multi_turn_keychain_trajectories_reproduce_the_engine_tokens(job: Job) -> None:
    rows = _keychain_rows(12)
    rows += [
        {"task_id": {"taskset": "chains", "task_id": i}, "seed": 100 + i, "hops": 3}
        for i in range(4)
    ]
    job.write(
        _servers(),
        rows,
        agent="walker",
        repeats=2,
        capture_tokens=True,
        environment_routes={"chains": "keys"},
    )
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    trajectories = _by_rollout(job)
    rollouts = job.rollouts
    assert len(rollouts) == 32 and set(trajectories) == {r["rollout_id"] for r in rollouts}
    multi_turn = 0
    raw = (job.out / "trajectories.jsonl").read_bytes()
    for rollout in rollouts:
        pointer = rollout["trajectory"]
        line = orjson.loads(raw[pointer["offset"] : pointer["offset"] + pointer["bytes"]])
        assert line["rollout_id"] == rollout["rollout_id"] and line["reward"] == rollout["reward"]
        assert "trajectory" not in rollout["result"]  # stored once, in trajectories.jsonl
        _check_tokens(line)
        kinds = [t["type"] for t in line["trajectory"]["turns"]]
        assert kinds[-1] == "verify" and kinds.count("tool") == rollout["result"]["tool_calls"]
        multi_turn += line["trajectory"]["model_calls"] > 1
    assert multi_turn >= 20  # episodes (routed to "keys") and the agent's rollouts alike


def test_row_sampling_reaches_every_model_call_and_bad_sampling_is_invalid_row(job: Job) -> None:
    rows = [
        {"seed": 1, "hops": 2, "sampling": {"temperature": 0.7, "max_tokens": 64}},
        {"seed": 2, "hops": 2},
        {"seed": 3, "hops": 1, "sampling": {"n": 4}},
    ]
    job.write(_servers(sampling={"top_p": 0.9}), rows, agent="walker", trajectories=True)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    trajectories = _by_rollout(job)
    first = [t for t in trajectories["0-0"]["trajectory"]["turns"] if t["type"] == "model"]
    assert len(first) >= 2
    assert all(t["params"] == {"top_p": 0.9, "temperature": 0.7, "max_tokens": 64} for t in first)
    second = [t for t in trajectories["1-0"]["trajectory"]["turns"] if t["type"] == "model"]
    assert all(t["params"] == {"top_p": 0.9} for t in second)
    assert trajectories["0-0"]["trajectory"]["capture"] == "turns"
    assert "prompt_ids" not in first[0]  # turns only: no token capture asked
    (failure,) = job.failures
    assert failure["error_kind"] == "invalid_row" and "'n' is not supported" in failure["message"]
    assert "row.sampling" in failure["message"]


def test_resume_after_kill_9_keeps_one_trajectory_per_rollout(job: Job) -> None:
    rows = _keychain_rows(120)
    job.write(
        _servers({"kind": "fixed", "seconds": 0.03}),
        rows,
        agent="walker",
        concurrency=8,
        capture_tokens=True,
    )
    proc = job.start()
    try:
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 30, timeout=90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert job.line_count("rollouts.jsonl") < len(rows)
    assert wait_for(lambda: not server_pids_alive(under=str(job.root)), timeout=15)
    rerun = job.run(timeout=240)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    rollouts = job.rollouts
    assert sorted(r["task_index"] for r in rollouts) == list(range(len(rows)))
    trajectories = _by_rollout(job)
    assert set(trajectories) == {r["rollout_id"] for r in rollouts}
    raw = (job.out / "trajectories.jsonl").read_bytes()
    for rollout in rollouts:
        pointer = rollout["trajectory"]
        line = orjson.loads(raw[pointer["offset"] : pointer["offset"] + pointer["bytes"]])
        assert line["rollout_id"] == rollout["rollout_id"]


def test_parquet_export_reads_back_with_pyarrow(job: Job) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _keychain_rows(6)
    for row in rows[::2]:  # half the rows ask for the engine's top-2 alternatives per token
        row["sampling"] = {"top_logprobs": 2}
    job.write(_servers(), rows, agent="walker", repeats=3, capture_tokens=True)
    assert job.run().returncode == 0
    out = job.root / "table.parquet"
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollgym",
            "export",
            str(job.out),
            "--format",
            "parquet",
            "-o",
            str(out),
        ],
        env=job.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    assert "wrote 18 rows" in exported.stdout
    table = pq.read_table(out)
    assert table.num_rows == 18
    rows = table.to_pylist()
    trajectories = _by_rollout(job)
    for row in rows:
        line = trajectories[row["rollout_id"]]
        assert row["group_id"] == row["task_index"] == line["task_index"]
        assert row["reward"] == line["reward"] and row["has_tokens"] and row["prefix_ok"]
        assert len(row["completion_ids"]) == len(row["logprobs"]) == len(row["loss_mask"])
        sequence = token_sequence(line["trajectory"])
        assert sequence is not None
        assert row["prompt_ids"] == sequence.prompt_ids
        assert row["completion_ids"] == sequence.completion_ids
        assert row["loss_mask"] == sequence.loss_mask
        _check_top_logprobs(row, asked=row["task_index"] % 2 == 0)
        # the rollout's usage: the simulated engine says nothing of a cache, so null
        assert row["cached_tokens"] is None and row["model_s"] > 0
        assert line["usage"]["output_tokens"] == row["completion_tokens"]
    groups = {row["group_id"] for row in rows}
    assert groups == set(range(6))


def _check_top_logprobs(row: dict[str, Any], *, asked: bool) -> None:
    """Where asked, every generated token has its 2 alternatives, the engine's own token first
    with its log-probability; tokens the model did not generate (and rows that did not ask)
    have none."""
    tokens, logprobs = row["top_tokens"], row["top_logprobs"]
    assert len(tokens) == len(logprobs) == len(row["completion_ids"])
    for index, generated in enumerate(row["loss_mask"]):
        if not (asked and generated):
            assert tokens[index] == [] and logprobs[index] == []
            continue
        assert len(tokens[index]) == len(logprobs[index]) == 2
        assert toy_tokenizer.token_id(tokens[index][0]) == row["completion_ids"][index]
        assert logprobs[index][0] == row["logprobs"][index] > logprobs[index][1]


def test_export_without_trajectories_says_how_to_get_them(job: Job) -> None:
    job.write(_servers(), _keychain_rows(1), agent="walker")
    assert job.run().returncode == 0
    exported = subprocess.run(
        [sys.executable, "-m", "rollgym", "export", str(job.out)],
        env=job.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 2 and "run.capture_tokens=true" in exported.stderr
    assert not (job.out / "trajectories.jsonl").exists()


def _nemo_rows() -> list[dict[str, Any]]:
    """Rows in NeMo Gym's format (responses_create_params + agent_ref + verifier fields)."""
    from rollgym.builtins.envs.keychain import SYSTEM_PROMPT, build_vault

    read_key = {
        "type": "function",
        "name": "read_key",
        "description": "Read one key of the vault.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
            "additionalProperties": False,
        },
        "strict": True,
    }
    rows: list[dict[str, Any]] = []
    for a in range(4):
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "user", "content": f"Compute: {a} + 7\nReply with 'Answer: <n>'."}
                    ],
                    "temperature": 0.5,
                    "max_output_tokens": 64,
                },
                "question": f"{a} + 7",
                "agent_ref": {"type": "responses_api_agents", "name": "math_simple_agent"},
            }
        )
    for seed in range(4):
        vault = build_vault(seed, 2, 2)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "developer", "content": SYSTEM_PROMPT},
                        {
                            "role": "user",
                            "content": [
                                {"type": "input_text", "text": f"Start key: {vault.start}"}
                            ],
                        },
                    ],
                    "tools": [read_key],
                },
                "seed": seed,
                "hops": 2,
                "agent_ref": {"type": "responses_api_agents", "name": "vault_agent"},
            }
        )
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    rows.append(
        {
            "responses_create_params": {"input": [{"role": "user", "content": [image]}]},
            "question": "1 + 1",
            "agent_ref": {"type": "responses_api_agents", "name": "math_simple_agent"},
        }
    )
    rows.append(
        {
            "responses_create_params": {
                "input": [
                    {"role": "user", "content": "Compute: 1 + 1"},
                    {"type": "reasoning", "summary": []},
                ]
            },
            "question": "1 + 1",
            "agent_ref": {"type": "responses_api_agents", "name": "math_simple_agent"},
        }
    )
    return rows


def test_nemo_gym_rows_run_unchanged(job: Job) -> None:
    servers = nemo_row_servers()
    job.write(servers, _nemo_rows(), agent="nemo", capture_tokens=True)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    rollouts = {r["task_index"]: r for r in job.rollouts}
    assert sorted(rollouts) == list(range(8))
    assert all(r["reward"] == 1.0 for r in rollouts.values())  # accuracy 1: every row solved
    assert all(rollouts[i]["result"]["tool_calls"] == 2 for i in range(4, 8))
    trajectories = _by_rollout(job)
    arith = [t for t in trajectories["0-0"]["trajectory"]["turns"] if t["type"] == "model"]
    assert arith[0]["params"]["temperature"] == 0.5 and arith[0]["params"]["max_tokens"] == 64
    for index in range(4, 8):
        _check_tokens(trajectories[f"{index}-0"])
    failures = {f["task_index"]: f for f in job.failures}
    assert sorted(failures) == [8, 9]
    assert {f["error_kind"] for f in failures.values()} == {"invalid_row"}
    assert "row.responses_create_params.input.0.content.0.type" in failures[8]["message"]
    assert "input_image" in failures[8]["message"]
    assert "row.responses_create_params.input.1.type" in failures[9]["message"]
    assert "reasoning" in failures[9]["message"]


def test_token_fields_pass_through_the_openai_upstream_proxy(job: Job) -> None:
    """The engine's fields reach the trajectory unchanged through the ``openai`` proxy (here in
    front of the simulated engine, as it would be in front of vLLM)."""
    servers = _servers()
    servers["engine"] = servers.pop("policy")
    servers["policy"] = {
        "kind": "model",
        "impl": "openai",
        "upstream": "engine",
        "model_name": "toy",
    }
    servers["keys"]["model"] = "engine"
    job.write(servers, _keychain_rows(4), agent="walker", capture_tokens=True)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    trajectories = _by_rollout(job)
    assert len(trajectories) == 4
    for line in trajectories.values():
        _check_tokens(line)


@pytest.mark.parametrize("through", ["engine", "proxy"])
def test_streamed_sdk_answers_are_recorded_like_plain_ones(job: Job, through: str) -> None:
    """An agent written with the official OpenAI SDK reads every answer as a stream: the
    trajectory still holds each answer whole (content, tool calls, finish reason, the usage of
    the last chunk) and the engine's streamed token ids and log-probabilities, so the token
    sequence is the engine's, exactly as for plain answers; directly and through the
    ``openai`` proxy, which passes the engine's stream through."""
    pytest.importorskip("openai")
    servers = _servers()
    servers["streamer"] = {
        "kind": "agent",
        "impl": "sdk_agents:StreamingToolAgent",
        "model": "policy",
        "environment": "keys",
    }
    if through == "proxy":
        servers["engine"] = servers.pop("policy")
        servers["policy"] = {
            "kind": "model",
            "impl": "openai",
            "upstream": "engine",
            "model_name": "m",
        }
        servers["keys"]["model"] = servers["walker"]["model"] = "engine"
    rows = _keychain_rows(6)
    for row in rows[::2]:
        row["sampling"] = {"top_logprobs": 2}
    job.write(servers, rows, agent="streamer", repeats=2, capture_tokens=True)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    trajectories = _by_rollout(job)
    assert len(trajectories) == 12 == len(job.rollouts)
    for line in trajectories.values():
        _check_tokens(line)  # the engine's exact sequence, mask and log-probabilities
        model_turns = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        tool_turns = [t for t in line["trajectory"]["turns"] if t["type"] == "tool"]
        assert len(tool_turns) == len(model_turns) - 1  # one tool call per turn, then answer
        for turn in model_turns:
            assert turn["streamed"] is True and "stream_incomplete" not in turn
            assert turn["usage"]["completion_tokens"] == len(turn["completion_ids"])
            assert turn["response_id"].startswith("chatcmpl-" + line["rollout_id"])
            asked = line["task_index"] % 2 == 0
            assert ("top_tokens" in turn) is asked
            if asked:
                assert [len(t) for t in turn["top_tokens"]] == [2] * len(turn["completion_ids"])
        *calls, last = model_turns
        for turn in calls:
            assert turn["finish_reason"] == "tool_calls"
            (call,) = turn["message"]["tool_calls"]
            assert call["id"] and call["function"]["name"] == "read_key"
            assert "key" in orjson.loads(call["function"]["arguments"])
        assert last["finish_reason"] == "stop" and last["message"]["content"].startswith("Answer")
