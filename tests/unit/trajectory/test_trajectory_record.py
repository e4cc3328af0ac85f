"""The trajectory recorder: deltas, the prefix check, missing tokens, bounds, the sequence."""

from __future__ import annotations

from typing import Any

from rollgym.trajectory import record
from rollgym.trajectory.record import TrajectoryRecorder
from rollgym.trajectory.tokens import token_sequence


def _answer(prompt: list[int], completion: list[int], content: str = "ok") -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "prompt_token_ids": prompt,
        "choices": [
            {
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "token_ids": completion,
                "logprobs": {"content": [{"token": "t", "logprob": -0.5} for _ in completion]},
            }
        ],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
    }


USER = {"role": "user", "content": "hi"}
TOOL = {"role": "tool", "content": "out"}


def test_turns_keep_only_what_is_new_and_the_prefix_holds() -> None:
    recorder = TrajectoryRecorder("tokens")
    recorder.model_call({"messages": [USER], "temperature": 0.3}, _answer([1, 2, 3], [4, 5]))
    recorder.tool_call("read_key", {"key": "k"}, "out")
    reply = {"role": "assistant", "content": "ok"}
    second = {"messages": [USER, reply, TOOL], "temperature": 0.3}
    recorder.model_call(second, _answer([1, 2, 3, 4, 5, 6, 7], [8]))
    recorder.verify("ok", {"reward": 1.0, "details": {}})
    data = recorder.to_json()
    first, tool, model, verify = data["turns"]
    assert first["params"] == {"temperature": 0.3} and first["prompt_ids"] == [1, 2, 3]
    assert tool == {"type": "tool", "name": "read_key", "arguments": {"key": "k"}, "output": "out"}
    assert model["messages_start"] == 2 and model["messages"] == [TOOL]
    assert model["extends_previous"] is True and model["prompt_start"] == 5
    assert model["prompt_ids"] == [6, 7] and verify["reward"] == 1.0
    assert data["prefix_ok"] is True and data["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
    }
    sequence = token_sequence(data)
    assert sequence is not None and sequence.prefix_ok
    assert sequence.prompt_ids == [1, 2, 3] and sequence.completion_ids == [4, 5, 6, 7, 8]
    assert sequence.loss_mask == [1, 1, 0, 0, 1]
    assert sequence.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5]


def test_a_retokenized_prompt_is_recorded_as_a_mismatch_never_hidden() -> None:
    recorder = TrajectoryRecorder("tokens")
    recorder.model_call({"messages": [USER]}, _answer([1, 2, 3], [4, 5]))
    # the engine re-tokenized the earlier completion differently: 4 5 became 45
    recorder.model_call({"messages": [USER, TOOL]}, _answer([1, 2, 3, 45, 6], [7]))
    data = recorder.to_json()
    turn = data["turns"][1]
    assert turn["extends_previous"] is False and turn["mismatch_at"] == 3
    assert turn["prompt_start"] == 0 and turn["prompt_ids"] == [1, 2, 3, 45, 6]
    assert data["prefix_ok"] is False
    sequence = token_sequence(data)
    assert sequence is not None and not sequence.prefix_ok
    assert sequence.completion_ids == [4, 5, 1, 2, 3, 45, 6, 7]
    assert sequence.loss_mask == [1, 1, 0, 0, 0, 0, 0, 1]


def test_an_engine_without_token_ids_is_marked_not_recomputed() -> None:
    recorder = TrajectoryRecorder("tokens")
    answer = {"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": {}}
    recorder.model_call({"messages": [USER]}, answer)
    data = recorder.to_json()
    assert data["turns"][0]["tokens_missing"] is True and "prompt_ids" not in data["turns"][0]
    assert data["prefix_ok"] is False and token_sequence(data) is None
    turns_only = TrajectoryRecorder("turns")
    turns_only.model_call({"messages": [USER]}, _answer([1], [2]))
    assert "prompt_ids" not in turns_only.to_json()["turns"][0]
    assert turns_only.request_fields() == {} and "prefix_ok" not in turns_only.to_json()


def test_turns_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(record, "MAX_TURNS", 3)
    recorder = TrajectoryRecorder("turns")
    for index in range(5):
        recorder.tool_call("t", {"i": index}, "")
    data = recorder.to_json()
    assert len(data["turns"]) == 3 and data["dropped_turns"] == 2
