"""The pieces that decide whether a recorded answer is whole and which message is which: the
completeness rules, one message in two spellings, a Responses answer as a chat completion,
and the conversation view of a trajectory recorded before spellings were recognised."""

from __future__ import annotations

import orjson

from rollgym.trajectory.completeness import incomplete_reason
from rollgym.trajectory.conversation import conversation
from rollgym.trajectory.messages import same_message
from rollgym.trajectory.responses import ResponsesStreamJoiner, as_chat_completion
from rollgym.trajectory.stream import ChatStreamJoiner

WHOLE = {
    "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}


def test_an_answer_is_whole_only_with_a_finish_reason_and_usage_that_agrees() -> None:
    assert incomplete_reason(WHOLE) is None
    assert incomplete_reason({**WHOLE, "choices": []}) == "no_finish_reason"
    null = [{"index": 0, "message": {"content": ""}, "finish_reason": None}]
    assert incomplete_reason({**WHOLE, "choices": null}) == "no_finish_reason"
    assert incomplete_reason({**WHOLE, "stream_incomplete": True}) == "stream_cut"
    ids = [{**WHOLE["choices"][0], "token_ids": [5, 6, 7]}]  # 3 arrived, usage says 2
    assert incomplete_reason({**WHOLE, "choices": ids}) == "usage_mismatch"
    assert incomplete_reason({**WHOLE, "prompt_token_ids": [1, 2]}) == "usage_mismatch"
    agreeing = [{**WHOLE["choices"][0], "token_ids": [5, 6]}]
    assert incomplete_reason({**WHOLE, "choices": agreeing, "prompt_token_ids": [1, 2, 3]}) is None


def test_llama_cpps_interrupted_stream_joins_to_an_incomplete_answer() -> None:
    joiner = ChatStreamJoiner()
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "A"}, "finish_reason": None}]}
    joiner.feed(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
    answer = joiner.answer()
    assert joiner.done and incomplete_reason(answer) == "no_finish_reason"


def test_one_message_in_two_spellings_is_the_same_message() -> None:
    engine = {
        "role": "assistant",
        "content": "Answer: 3",
        "refusal": None,
        "tool_calls": [],
        "function_call": None,
        "reasoning_content": None,
    }
    assert same_message(engine, {"role": "assistant", "content": "Answer: 3"})
    assert same_message(engine, {"content": "Answer: 3", "role": "assistant", "tool_calls": []})
    assert not same_message(engine, {"role": "assistant", "content": "Answer: 4"})
    assert not same_message(engine, {"role": "user", "content": "Answer: 3"})
    assert not same_message({"role": "assistant", "content": ""}, {"role": "assistant"})


RESPONSE = {
    "id": "resp_1-0.0",
    "model": "m",
    "status": "completed",
    "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"k": 1}'},
    ],
    "usage": {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12},
    "policy_version": 3,
}


def test_a_response_is_the_chat_completion_it_amounts_to() -> None:
    answer = as_chat_completion(RESPONSE)
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "read",
        "arguments": '{"k": 1}',
    }
    assert answer["usage"]["prompt_tokens"] == 7 and answer["usage"]["completion_tokens"] == 5
    assert answer["policy_version"] == 3 and incomplete_reason(answer) is None
    cut = {
        **RESPONSE,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert as_chat_completion(cut)["choices"][0]["finish_reason"] == "length"
    assert incomplete_reason(as_chat_completion({**RESPONSE, "status": "failed"})) == (
        "no_finish_reason"
    )


def _event(kind: str, **fields: object) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


def test_a_responses_stream_joins_to_its_last_response_or_is_cut() -> None:
    started = {**RESPONSE, "status": "in_progress", "output": [], "usage": None}
    head = _event("response.created", response=started) + _event(
        "response.output_text.delta", delta="Let me"
    )
    whole = ResponsesStreamJoiner()
    whole.feed(head + _event("response.completed", response=RESPONSE))
    assert whole.answer() == as_chat_completion(RESPONSE)
    cut = ResponsesStreamJoiner()
    cut.feed(head)
    answer = cut.answer()
    assert answer["choices"][0]["message"]["content"] == "Let me"
    assert incomplete_reason(answer) == "stream_cut"


def test_an_older_trajectory_shows_no_assistant_turn_twice() -> None:
    """Recorded before spellings were recognised: the re-sent answer was stored as new."""
    user = {"role": "user", "content": "2 + 2?"}
    answer = {"role": "assistant", "content": "4", "refusal": None}
    turns = [
        {"type": "model", "call": 0, "messages_start": 0, "messages": [user], "message": answer},
        {
            "type": "model",
            "call": 1,
            "messages_start": 1,
            "messages": [
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": "Sure?"},
            ],
            "message": {"role": "assistant", "content": "Yes."},
        },
    ]
    entries = conversation({"turns": turns})
    assert [(e["kind"], e.get("content")) for e in entries] == [
        ("message", "2 + 2?"),
        ("answer", "4"),
        ("message", "Sure?"),
        ("answer", "Yes."),
    ]
