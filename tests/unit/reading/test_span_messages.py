"""Messages recorded on spans (OTel GenAI conventions) read as conversation entries."""

from __future__ import annotations

import json
from typing import Any

from rollgym.reading.span_messages import recorded_conversation


def _model_span(start: int, attributes: dict[str, Any], events: Any = ()) -> dict[str, Any]:
    return {
        "name": "chat m",
        "start_ns": start,
        "duration_ms": 12.5,
        "attributes": attributes,
        "events": list(events),
    }


def test_input_and_output_message_attributes_in_call_order() -> None:
    first_in = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    first_out = [
        {"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}
    ]
    second_in = [*first_in, *first_out, {"role": "user", "content": "and 3+3?"}]
    spans = [
        _model_span(
            2,
            {
                "gen_ai.input.messages": json.dumps(second_in),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "6"}]),
            },
        ),
        _model_span(
            1,
            {
                "gen_ai.input.messages": json.dumps(first_in),
                "gen_ai.output.messages": json.dumps(first_out),
                "gen_ai.usage.input_tokens": 9,
                "gen_ai.usage.output_tokens": 1,
            },
        ),
        {"name": "other", "start_ns": 0, "attributes": {}, "events": []},
    ]
    entries = recorded_conversation(spans)
    assert [(e["kind"], e["role"], e["content"]) for e in entries] == [
        ("message", "system", "be brief"),
        ("message", "user", "2+2?"),
        ("answer", "assistant", "4"),
        ("message", "user", "and 3+3?"),  # only what the second call added
        ("answer", "assistant", "6"),
    ]
    first_answer = entries[2]
    assert (first_answer["input_tokens"], first_answer["output_tokens"]) == (9, 1)
    assert first_answer["latency_ms"] == 12.5 and first_answer["finish_reason"] == "stop"
    assert [e["call"] for e in entries if e["kind"] == "answer"] == [0, 1]


def test_per_message_events_and_spans_without_text() -> None:
    events = [
        {"name": "gen_ai.user.message", "attributes": {"content": "hi"}},
        {
            "name": "gen_ai.choice",
            "attributes": {"message": json.dumps({"role": "assistant", "content": "hello"})},
        },
    ]
    entries = recorded_conversation([_model_span(0, {}, events)])
    assert [(e["kind"], e["content"]) for e in entries] == [("message", "hi"), ("answer", "hello")]
    assert recorded_conversation([_model_span(0, {"gen_ai.input.messages": "not json"})]) == []
