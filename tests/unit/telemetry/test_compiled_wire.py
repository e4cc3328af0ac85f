"""The span encoder compiled with mypyc writes exactly the pure-Python encoder's bytes.

The pure encoder is checked against the SDK's own (``test_span_pipeline.py``); this holds the
compiled copy (built by ``pip install -e .``; skipped where it is not) to the pure one, record
by record and request by request, over what spans carry: every attribute type, events, links,
trace state, remote parents, statuses, values the wire cannot carry, several scopes. And the
exporter child takes the compiled copy only while it was built from ``wire.py`` as it is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import rollgym.compiled as compiled
from rollgym.telemetry.pipeline import native, wire

T0 = 1_800_000_000_000_000_000


def _compiled_or_skip() -> ModuleType:
    module = native.compiled_wire()
    if module is None:
        pytest.skip("the compiled encoder is not built here (pip install -e . builds it)")
    return module


def _record(i: int) -> tuple[Any, ...]:
    attributes: dict[str, Any] = {
        "gym.rollout.id": f"{i % 13}-{i % 3}",
        "gym.rollout.attempt": i % 3,
        "gym.rollout.reward": (i % 5) / 4,
        "ok": i % 2 == 0,
        "big": (1 << 63) - 1 - i,
        "negative": -i - 1,
        "text": "é✓" * (i % 70),  # lengths past one varint byte
        "list": ["a", "b", str(i)] if i % 4 else [1, 2, i],
        "floats": (0.5, float(i)),
        "too_big": 1 << 70,  # the wire cannot carry it: this attribute alone is skipped
    }
    events = [("retry", T0 + i, {"n": i})] if i % 3 == 0 else None
    links = [(i + 77, i + 5, i % 2 == 1, {"k": "job"} if i % 4 else None)] if i % 2 else None
    return (
        (i + 1) * 0x1234_5678_9ABC_DEF0_1111,
        i + 1,
        0 if i % 5 == 0 else i + 1000,
        i % 7 == 0,
        "gym.rollout.dispatch" if i % 2 else f"POST /run/{i % 3}",
        i % 5,
        T0 + i,
        T0 + i + 20_000_000,
        attributes,
        events,
        links,
        i % 3,
        "failed: é" if i % 3 == 2 else None,
        ("rollgym", "1.0", None) if i % 6 else ("user.lib", None, "https://schema.example/1"),
        (("vendor", f"v{i}"),) if i % 8 == 0 else None,
    )


RESOURCE = {"service.name": "rollgym-driver", "gym.run.id": "r-1", "process.pid": 4242}


def test_the_compiled_encoder_writes_the_pure_encoders_bytes() -> None:
    fast = _compiled_or_skip()
    records = [_record(i) for i in range(300)]
    for record in records:
        assert fast.span(record) == wire.span(record)
    for start in range(0, 300, 50):
        part = records[start : start + 50]
        body = fast.encode_request(RESOURCE, part, "https://schema.example/r")
        assert body == wire.encode_request(RESOURCE, part, "https://schema.example/r")
    request = ExportTraceServiceRequest.FromString(fast.encode_request(RESOURCE, records))
    assert sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans) == 300
    assert fast.varint(1 << 40) == wire.varint(1 << 40)


def test_the_child_encodes_with_the_compiled_copy_only_while_it_is_current(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fast = _compiled_or_skip()
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV, raising=False)
    assert native.source_digest() == fast.SOURCE_DIGEST
    assert native.choose_wire() is fast
    # wire.py edited since the build: the stale binary is refused, saying how to rebuild
    monkeypatch.setattr(native, "source_digest", lambda: "0" * 64)
    assert native.compiled_wire() is None
    assert native.choose_wire() is wire
    assert "pip install -e ." in caplog.text
    monkeypatch.setattr(native, "source_digest", lambda: fast.SOURCE_DIGEST)
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "1")
    assert native.choose_wire() is wire


def test_without_a_build_the_child_encodes_in_pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled, "current_copies", lambda sources, digest: None)
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV, raising=False)
    assert native.choose_wire() is wire
