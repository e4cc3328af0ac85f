"""The engine's own count of each model call, read from its spans (``traces check --data``)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from rollgym.reading.engine_calls import EngineCall, engine_calls
from rollgym.reading.engine_ids import sent_request_id, sub_request_index
from rollgym.tracestore.schema import migrate


@pytest.mark.parametrize(
    ("engine_id", "sent", "sub"),
    [
        ("chatcmpl-3-0.2", "3-0.2", None),
        ("0_chatcmpl-3-0.2", "3-0.2", 0),
        ("chatcmpl-1_3-0.2", "3-0.2", 1),  # the sub-request prefix inside the API prefix
        ("chatcmpl-3-0.2-1a2b3c4d", "3-0.2", None),  # vLLM's random suffix
        ("cmpl-custom.v1.4", "custom.v1.4", None),
        (
            "chatcmpl-5b1f9c1e-2a3d-5e6f-8a9b-0c1d2e3f4a5b-1a2b3c4d",
            "5b1f9c1e-2a3d-5e6f-8a9b-0c1d2e3f4a5b",
            None,
        ),
    ],
)
def test_the_id_as_sent(engine_id: str, sent: str, sub: int | None) -> None:
    assert sent_request_id(engine_id) == sent
    assert sub_request_index(engine_id) == sub


def _store(*spans: tuple[str, int, dict[str, object]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    migrate(conn, ":memory:", "test")
    conn.execute("INSERT INTO resources (id, fingerprint, attributes) VALUES (1, x'00', '{}')")
    for index, (name, start, attributes) in enumerate(spans):
        conn.execute(
            "INSERT INTO spans (trace_id, span_id, name, kind, start_ns, end_ns, status_code, "
            "resource_id, attributes, link_count) VALUES (?, ?, ?, 2, ?, ?, 0, 1, ?, 0)",
            (b"t" * 16, bytes([index]) * 8, name, start, start + 1, json.dumps(attributes)),
        )
    return conn


def _llm(engine_id: str, prompt: int, completion: int) -> dict[str, object]:
    return {
        "gen_ai.request.id": engine_id,
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
    }


def test_sub_requests_are_one_call_and_a_served_twice_id_keeps_the_later() -> None:
    conn = _store(
        ("llm_request", 1, _llm("chatcmpl-3-0.0", 20, 5)),
        ("llm_request", 2, _llm("0_chatcmpl-3-0.1", 30, 4)),
        ("llm_request", 3, _llm("1_chatcmpl-3-0.1", 30, 6)),
        ("llm_request", 4, _llm("chatcmpl-3-0.2-aaaa1111", 40, 9)),
        ("llm_request", 5, _llm("chatcmpl-3-0.2-bbbb2222", 40, 7)),  # an upstream retry
        ("gym.model.chat", 6, {"gen_ai.response.id": "chatcmpl-3-0.0"}),  # not an engine span
        ("llm_request", 7, {"gen_ai.request.id": "chatcmpl-4-0.0"}),  # no counts
    )
    assert engine_calls(conn) == {
        "3-0.0": EngineCall(20, 5, 1),
        "3-0.1": EngineCall(30, 10, 2),
        "3-0.2": EngineCall(40, 7, 2),
        "4-0.0": EngineCall(None, None, 1),
    }
