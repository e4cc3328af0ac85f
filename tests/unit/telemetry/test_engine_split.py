"""The engine span reports vLLM's split of its model time (what ``traces profile`` reads)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rollgym.telemetry import names, spans


class _Span:
    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.attributes.update(attributes)


def test_prefill_and_decode_follow_from_queue_first_token_and_end() -> None:
    span = _Span()
    timings = SimpleNamespace(time_in_queue=0.5, time_to_first_token=0.75, e2e=2.0)
    spans.record_engine_timings(span, timings, {"prompt_tokens": 3, "completion_tokens": 4})  # type: ignore[arg-type]
    got = span.attributes
    assert got[names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL] == pytest.approx(0.25)
    assert got[names.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE] == pytest.approx(1.25)
    assert got[names.GEN_AI_LATENCY_TIME_IN_QUEUE] == 0.5
    assert got[names.GEN_AI_USAGE_COMPLETION_TOKENS] == 4  # vLLM's name for it
    assert names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL == "gen_ai.latency.time_in_model_prefill"
