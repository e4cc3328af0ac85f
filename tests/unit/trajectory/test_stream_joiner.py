"""Joining a streamed chat completion back into one answer, from bytes cut anywhere."""

from __future__ import annotations

from typing import Any

import orjson

from rollgym.servers import sse
from rollgym.trajectory.completeness import incomplete_reason
from rollgym.trajectory.stream import ChatStreamJoiner

ANSWER: dict[str, Any] = {
    "id": "chatcmpl-7-0.1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "prompt_token_ids": list(range(100, 140)),
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Answer: 42 is the key"},
            "finish_reason": "stop",
            "token_ids": list(range(20)),
            "logprobs": {"content": [{"token": str(i), "logprob": -i / 10} for i in range(20)]},
        }
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60},
}


def _joined(stream: bytes, piece: int) -> dict[str, Any]:
    joiner = ChatStreamJoiner()
    for start in range(0, len(stream), piece):
        joiner.feed(stream[start : start + piece])
    return joiner.answer()


def test_a_stream_cut_anywhere_joins_to_the_answer_it_streams() -> None:
    stream = b"".join(sse.chat_chunks(ANSWER, include_usage=True))
    for piece in (1, 7, 64, len(stream)):
        joined = _joined(stream, piece)
        assert joined["choices"][0] == ANSWER["choices"][0]
        assert joined["prompt_token_ids"] == ANSWER["prompt_token_ids"]
        assert joined["usage"] == ANSWER["usage"] and joined["id"] == ANSWER["id"]
        assert "stream_incomplete" not in joined


def test_tool_call_deltas_merge_by_index_and_a_cut_stream_is_marked() -> None:
    def line(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\r\n\r\n"

    call = {"index": 0, "id": "call-1", "type": "function", "function": {"name": "read_key"}}
    stream = [
        line({"role": "assistant", "content": None}),
        line({"tool_calls": [{**call, "function": {**call["function"], "arguments": '{"ke'}}]}),
        line({"tool_calls": [{"index": 0, "function": {"arguments": 'y": "k-1"}'}}]}),
        line({"tool_calls": [{"index": 1, "id": "call-2", "function": {"name": "other"}}]}),
        b": a comment line, ignored\n\n",
        line({}, "tool_calls"),
    ]
    joined = _joined(b"".join(stream), 5)
    message = joined["choices"][0]["message"]
    assert message["content"] is None and joined["choices"][0]["finish_reason"] == "tool_calls"
    first, second = message["tool_calls"]
    assert first == {
        "id": "call-1",
        "type": "function",
        "function": {"name": "read_key", "arguments": '{"key": "k-1"}'},
    }
    assert second["id"] == "call-2" and second["function"] == {"name": "other", "arguments": ""}
    assert joined["usage"] is None  # no usage chunk unless the request asked for one
    assert joined["stream_incomplete"] is True  # it never said [DONE]
    assert "stream_incomplete" not in _joined(b"".join([*stream, sse.DONE]), 3)


def _events(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def test_an_event_that_is_not_a_json_object_marks_the_answer_however_it_ends() -> None:
    whole = b"".join(sse.chat_chunks(ANSWER, include_usage=True))
    first, *rest = whole.split(b"\n\n", 1)
    for damage in (b'{"id": "c", "choices": [{"index": 0, "delta": {"cont', b"[1, 2]", b"42"):
        stream = first + b"\n\n" + _events(damage) + rest[0]
        for piece in (1, 9, len(stream)):
            joined = _joined(stream, piece)
            # [DONE] and the finish reason came, but an event's content may be missing
            assert "stream_incomplete" not in joined
            assert joined["choices"][0]["finish_reason"] == "stop"
            assert incomplete_reason(joined) == "stream_damaged"
    assert incomplete_reason(_joined(whole, 4)) is None


def test_an_error_event_marks_the_answer_and_its_chunks_stay() -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "Ans"}}]}
    done = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    for error in (
        {"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}},
        {"object": "error", "message": "engine dead", "type": "InternalServerError"},
    ):
        stream = _events(*(orjson.dumps(e) for e in (chunk, error, done)), b"[DONE]")
        joined = _joined(stream, 7)
        assert joined["choices"][0]["message"]["content"] == "Ans"
        assert incomplete_reason(joined) == "stream_error"
