"""The trajectory recorder: deltas, the prefix check, missing tokens, bounds, the sequence."""

from __future__ import annotations

from typing import Any

import orjson

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


def test_token_fields_are_kept_compact_and_written_as_plain_lists() -> None:
    recorder = TrajectoryRecorder("tokens")
    recorder.model_call({"messages": [USER]}, _answer([1, 2, 3], [4, 5]))
    turn = recorder.turns[0]
    # while the rollout runs: arrays of machine integers / doubles, not lists of objects
    assert turn["prompt_ids"].typecode == "q" and turn["logprobs"].typecode == "d"
    written = orjson.loads(orjson.dumps(recorder.to_json()))["turns"][0]
    assert written["prompt_ids"] == [1, 2, 3] and written["completion_ids"] == [4, 5]
    assert written["logprobs"] == [-0.5, -0.5]


def test_ids_that_are_not_integers_count_as_missing_tokens() -> None:
    for bad in ([1, 2.5], [1, "2"], [1, None], "123", None):
        recorder = TrajectoryRecorder("tokens")
        answer = _answer([1], [4])
        answer["prompt_token_ids"] = bad
        recorder.model_call({"messages": [USER]}, answer)
        assert recorder.to_json()["turns"][0]["tokens_missing"] is True


def test_logprobs_the_engine_gave_short_are_flagged_not_padded() -> None:
    recorder = TrajectoryRecorder("tokens")
    answer = _answer([1], [4, 5, 6])
    answer["choices"][0]["logprobs"]["content"][1] = {"token": "t", "logprob": None}
    recorder.model_call({"messages": [USER]}, answer)
    turn = recorder.to_json()["turns"][0]
    assert turn["logprobs"] == [-0.5, -0.5] and turn["logprobs_mismatch"] is True


def test_top_logprobs_are_kept_per_token_when_asked() -> None:
    answer = _answer([1], [4, 5])
    content = answer["choices"][0]["logprobs"]["content"]
    for entry, tops in zip(content, (["a", "b"], ["c", "d"]), strict=True):
        entry["top_logprobs"] = [
            {"token": tops[0], "logprob": -0.5, "bytes": [97]},
            {"token": tops[1], "logprob": -1.5, "bytes": [98]},
        ]
    asked = TrajectoryRecorder("tokens")
    asked.model_call({"messages": [USER], "logprobs": True, "top_logprobs": 2}, answer)
    turn = asked.to_json()["turns"][0]
    assert turn["top_tokens"] == [["a", "b"], ["c", "d"]]
    assert turn["top_logprobs"] == [[-0.5, -1.5], [-0.5, -1.5]]
    not_asked = TrajectoryRecorder("tokens")
    not_asked.model_call({"messages": [USER], "logprobs": True}, answer)
    assert "top_tokens" not in not_asked.to_json()["turns"][0]


def test_long_tool_outputs_are_cut_and_marked_never_silently() -> None:
    recorder = TrajectoryRecorder("turns", tool_output_max_bytes=10)
    recorder.tool_call("t", {}, "short")
    recorder.tool_call("t", {}, "é" * 20)  # 40 bytes: cut at a character boundary
    big = {"role": "tool", "tool_call_id": "c", "content": "x" * 25}
    recorder.model_call({"messages": [USER, big]}, _answer([1], [2]))
    data = recorder.to_json()
    short, cut, model = data["turns"]
    assert short["output"] == "short" and "truncated" not in short
    assert cut["output"] == "é" * 5 and cut["truncated"] is True and cut["output_bytes"] == 40
    assert model["messages"] == [USER, {**big, "content": "x" * 10}]
    assert model["truncated_messages"] == [{"message": 1, "bytes": 25}]
    assert big["content"] == "x" * 25  # the agent's own message is untouched
    assert data["truncated_texts"] == 2 and data["tool_output_max_bytes"] == 10
    assert "truncated_texts" not in TrajectoryRecorder("turns").to_json()


def test_a_long_answer_is_recorded_whole_once_not_again_in_its_verify_turn() -> None:
    """The verify turn repeats the answer (and environments echo it in their details): those
    copies are cut to the cap and marked; the model turn keeps the answer whole."""
    long = "é" * 30  # 60 bytes
    recorder = TrajectoryRecorder("turns", tool_output_max_bytes=10)
    recorder.model_call({"messages": [USER]}, _answer([1], [2], content=long))
    verdict = {"reward": 1.0, "details": {"answer": long, "expected": "4", "parsed": True}}
    recorder.verify(long, verdict)
    recorder.verify("4", {"reward": 1.0, "details": {"answer": "4"}})
    data = recorder.to_json()
    model, cut, short = data["turns"]
    assert model["message"]["content"] == long
    assert cut["answer"] == "é" * 5 and cut["answer_bytes"] == 60 and cut["truncated"] is True
    assert cut["details"] == {"answer": "é" * 5, "expected": "4", "parsed": True}
    assert cut["truncated_details"] == {"answer": 60}
    assert cut["reward"] == 1.0
    assert verdict["details"]["answer"] == long  # the environment's own verdict is untouched
    assert short == {"type": "verify", "answer": "4", "reward": 1.0, "details": {"answer": "4"}}
    assert data["truncated_texts"] == 2


def test_logprobs_without_token_ids_are_kept_and_what_is_missing_is_named() -> None:
    """An engine that answers log-probabilities but no token ids (llama.cpp's server)."""
    recorder = TrajectoryRecorder("tokens")
    answer = _answer([1, 2], [3, 4])
    del answer["prompt_token_ids"], answer["choices"][0]["token_ids"]
    recorder.model_call({"messages": [USER], "top_logprobs": 0}, answer)
    bare = _answer([1, 2], [3])
    del bare["choices"][0]["logprobs"]
    recorder.model_call({"messages": [USER]}, bare)
    data = orjson.loads(orjson.dumps(recorder.to_json()))  # what travels is plain JSON
    first, second = data["turns"]
    assert first["missing"] == ["prompt_ids", "completion_ids"] and first["tokens_missing"]
    assert first["logprobs"] == [-0.5, -0.5] and "top_tokens" not in first
    assert second["missing"] == ["logprobs"] and "tokens_missing" not in second
    assert token_sequence(data) is None  # no token sequence without the ids


def test_token_capture_asks_for_top_logprobs_zero_unless_sampling_sets_it() -> None:
    from rollgym.servers.rollout_context import RolloutContext

    recorder = TrajectoryRecorder("tokens")
    assert recorder.request_fields()["top_logprobs"] == 0
    assert RolloutContext("1-0", None, None, trajectory=recorder)._params["top_logprobs"] == 0
    mine = RolloutContext(
        "1-0", None, None, sampling={"top_logprobs": 3}, trajectory=TrajectoryRecorder("tokens")
    )
    assert mine._params["top_logprobs"] == 3 and mine._params["logprobs"] is True
