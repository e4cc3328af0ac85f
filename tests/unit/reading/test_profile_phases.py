"""The attribution rule on a hand-built trace whose answer is worked out by hand."""

from __future__ import annotations

import pytest

from rollgym.reading.profile_phases import (
    PHASE_INDEX,
    PHASES,
    SpanRecord,
    attribute_dispatch,
    phase_of,
)
from rollgym.telemetry import names

from .span_builder import MS
from .span_builder import span as _span


def _hand_built() -> tuple[SpanRecord, list[SpanRecord]]:
    """dispatch 0..100 ms with 10 ms admission wait: 110 ms of window, answers in the test."""
    root = _span(names.SPAN_DISPATCH, 0, 100, None, admission_s=0.010)
    client = _span("POST", 1, 99, root, kind=3, client_queue_s=0.002)
    server = _span("POST /run", 5, 97, client, kind=2, server_kind="agent")
    rollout = _span(names.SPAN_ROLLOUT, 6, 96, server, server_kind="agent")
    chat = _span(names.SPAN_MODEL_CHAT, 10, 50, rollout, kind=3, input_tokens=7, output_tokens=3)
    chat_client = _span("POST", 11, 49, chat, kind=3)
    model_server = _span("POST /v1/chat/completions", 13, 47, chat_client, 2, server_kind="model")
    engine = _span(
        names.SPAN_ENGINE_REQUEST,
        14,
        46,
        model_server,
        kind=2,
        server_kind="model",
        engine_queue_s=0.004,
        engine_prefill_s=0.008,
        engine_decode_s=0.016,
    )
    tool_a = _span(names.SPAN_ENV_TOOL, 55, 60, rollout, server_kind="environment")
    tool_b = _span(names.SPAN_ENV_TOOL, 58, 65, rollout, server_kind="environment")
    sandbox = _span(names.SPAN_SANDBOX_EXEC, 70, 75, rollout)
    verify = _span(names.SPAN_VERIFY, 80, 85, rollout)
    custom = _span("my.own.step", 86, 88, rollout)
    overrun = _span(names.SPAN_VERIFY, 94, 120, rollout)  # outlives its parent: clipped at 96
    spans = [client, server, rollout, chat, chat_client, model_server, engine, tool_a, tool_b]
    spans += [sandbox, verify, custom, overrun]
    return root, spans


EXPECTED_MS = {
    "admission_wait": 10,
    "collector": 2,  # 0..1 and 99..100
    "client_queue": 2,  # 1..3
    "http": 10,  # client 3..5, 97..99; server 5..6, 96..97; model-call client 11..13, 47..49
    "agent": 28,  # rollout 6..10, 50..55, 65..70, 75..80, 85..86, 88..94; chat 10..11, 49..50
    "model_server": 6,  # server 13..14, 46..47; engine 42..46 beyond its split
    "engine_queue": 4,
    "engine_prefill": 8,
    "engine_decode": 16,
    "tools": 10,  # 55..65: the union of two overlapping calls, not their sum
    "sandbox": 5,
    "verify": 7,  # 80..85 and 94..96
    "unattributed": 2,  # the unknown span 86..88
}


def test_hand_built_trace_has_the_worked_out_answer() -> None:
    root, spans = _hand_built()
    profile = attribute_dispatch(root, list(reversed(spans)))
    got = {name: profile.phase_ns[i] / MS for i, name in enumerate(PHASES)}
    assert got == pytest.approx({name: float(EXPECTED_MS.get(name, 0)) for name in PHASES})
    assert profile.wall_ns == 110 * MS == sum(profile.phase_ns)
    assert profile.dominant_phase() == "agent"
    assert (profile.model_calls, profile.tool_calls) == (1, 2)
    assert (profile.input_tokens, profile.output_tokens) == (7, 3)


def test_the_fast_path_and_the_sweep_agree() -> None:
    """Without overlapping siblings the per-node subtraction answers; the general sweep must
    give the same numbers on the same tree, and does on the overlapping one too."""
    root, spans = _hand_built()
    overlapping = attribute_dispatch(root, spans)
    assert overlapping.phase_ns == attribute_dispatch(root, spans, sweep=True).phase_ns
    tool_b = next(s for s in spans if s.name == names.SPAN_ENV_TOOL and s.start_ns == 58 * MS)
    tool_b.start_ns, tool_b.end_ns = 60 * MS, 67 * MS  # now back to back with the first
    fast = attribute_dispatch(root, spans)
    assert fast.phase_ns == attribute_dispatch(root, spans, sweep=True).phase_ns
    assert fast.phase_ns[PHASE_INDEX["tools"]] == 12 * MS
    assert fast.phase_ns[PHASE_INDEX["agent"]] == 26 * MS
    assert sum(fast.phase_ns) == 110 * MS


def test_an_orphan_counts_under_the_dispatch_and_spans_elsewhere_do_not() -> None:
    root = _span(names.SPAN_DISPATCH, 0, 10, None)
    orphan = SpanRecord(b"orphan--", b"missing!", names.SPAN_VERIFY, 1, 2 * MS, 4 * MS)
    other_root = _span(names.SPAN_DISPATCH, 0, 10, None)
    elsewhere = _span(names.SPAN_ENV_TOOL, 1, 9, other_root)
    profile = attribute_dispatch(root, [orphan, other_root, elsewhere])
    assert profile.phase_ns[PHASE_INDEX["verify"]] == 2 * MS
    assert profile.phase_ns[PHASE_INDEX["tools"]] == 0
    assert profile.phase_ns[PHASE_INDEX["collector"]] == 8 * MS


def test_an_engine_split_longer_than_its_span_is_cut_at_the_span() -> None:
    root = _span(names.SPAN_DISPATCH, 0, 10, None)
    engine = _span(
        names.SPAN_ENGINE_REQUEST, 2, 6, root, 2, engine_queue_s=0.003, engine_decode_s=0.5
    )
    profile = attribute_dispatch(root, [engine])
    assert profile.phase_ns[PHASE_INDEX["engine_queue"]] == 3 * MS
    assert profile.phase_ns[PHASE_INDEX["engine_decode"]] == 1 * MS
    assert sum(profile.phase_ns) == 10 * MS


@pytest.mark.parametrize(
    ("name", "kind", "server_kind", "phase"),
    [
        ("POST", 3, "agent", "http"),
        ("POST /run", 2, "agent", "http"),
        ("POST /v1/chat/completions", 2, "model", "model_server"),
        ("something", 1, "model", "model_server"),
        ("something", 1, "agent", "unattributed"),
        (names.SPAN_SANDBOX_CREATE, 1, None, "sandbox"),
        (names.SPAN_ENV_SEED, 1, None, "tools"),
    ],
)
def test_phase_of(name: str, kind: int, server_kind: str | None, phase: str) -> None:
    assert phase_of(SpanRecord(b"x", None, name, kind, 0, 1, server_kind)) == phase
