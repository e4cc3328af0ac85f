"""The SSE builders read a finished answer defensively: an odd shape streams what is there."""

from __future__ import annotations

from typing import Any

import orjson

from rollgym.servers.sse import DONE, chat_chunks, response_events


def _data(events: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(e.split(b"data: ", 1)[1]) for e in events if e != DONE]


def test_chat_chunks_of_an_answer_whose_choices_are_not_a_list() -> None:
    events = list(chat_chunks({"id": "c1", "choices": "junk"}, include_usage=False))
    assert events == [DONE]


def test_chat_chunks_stream_tokens_only_when_they_are_lists() -> None:
    answer = {
        "id": "c2",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi there"},
                "token_ids": [1, 2, 3],
                "logprobs": "not an object",
                "finish_reason": "stop",
            }
        ],
    }
    chunks = _data(list(chat_chunks(answer, include_usage=False)))
    engine = [c["choices"][0] for c in chunks if "token_ids" in c["choices"][0]]
    assert [e["token_ids"] for e in engine] == [[1, 2, 3]]
    assert all("logprobs" not in e for e in engine)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_response_events_of_a_response_without_output_list() -> None:
    events = list(response_events({"id": "resp_1", "status": "completed", "output": None}))
    kinds = [e.split(b"\n", 1)[0] for e in events]
    assert kinds == [
        b"event: response.created",
        b"event: response.in_progress",
        b"event: response.completed",
    ]
