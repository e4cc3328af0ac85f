"""The wire reader gives exactly the rows of the message path (opentelemetry-proto), or the
same refusal, for SDK-encoded spans, odd but valid encodings, and damaged bytes: both the
pure-Python reader and its mypyc-compiled copy (when built; see rollgym.tracestore.native)."""

from __future__ import annotations

import random
import sqlite3
from types import ModuleType

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from rollgym.telemetry import names
from rollgym.tracestore import native, record_rows, span_rows, wire_rows
from rollgym.tracestore.decode import PROTOBUF_TYPE, PayloadError, SpanBatch, parse_traces
from rollgym.tracestore.span_rows import to_rows
from rollgym.tracestore.store import SCHEMA, ResourceRegistry


def _compiled_or_skip() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The compiled (span_rows, wire_rows, record_rows); the test is skipped, saying why, when not built."""
    compiled = native.compiled_readers()
    if compiled is None:
        pytest.skip("the compiled readers are not built (pip install -e . builds them)")
    return compiled


@pytest.fixture(params=["python", "compiled"])
def reader(request: pytest.FixtureRequest) -> ModuleType:
    """Each wire reader: the pure-Python module, and the compiled copy when it is built."""
    if request.param == "python":
        return wire_rows
    return _compiled_or_skip()[1]


def _registry() -> ResourceRegistry:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    return ResourceRegistry(conn)


def _reference(body: bytes, registry: ResourceRegistry) -> SpanBatch | str:
    try:
        return to_rows(parse_traces(body, PROTOBUF_TYPE), registry)
    except PayloadError as exc:
        return f"refused: {exc}"


def _wire(reader: ModuleType, body: bytes, registry: ResourceRegistry) -> SpanBatch | str:
    try:
        batch: SpanBatch = reader.rows_from_protobuf(body, registry)
        return batch
    except PayloadError as exc:
        return f"refused: {exc}"


def _sdk_request() -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({names.RUN_ID: "run-7", "service.name": "agent", "n": 3})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wire-test", "1.0")
    with tracer.start_as_current_span(names.SPAN_JOB) as job:
        pass
    attrs = {
        names.ROLLOUT_ID: "3-0-a2",
        names.ROLLOUT_ATTEMPT: 2,
        names.DISPATCH_NAME: "solver",
        names.ROLLOUT_REWARD: 0.75,
        names.ROLLOUT_OUTCOME: "ok",
        "negative": -(1 << 40),
        "flag": True,
        "off": False,
        "texts": ("a", "ü", ""),
        "numbers": (1, 2, 3),
        "unicode ✓": "välue",
    }
    with tracer.start_as_current_span(
        names.SPAN_DISPATCH, links=[Link(job.get_span_context(), {"why": "job"})], attributes=attrs
    ) as dispatch:
        dispatch.add_event("retry", {"attempt": 1, "delay_s": 0.5})
        dispatch.add_event("plain")
        with tracer.start_as_current_span("POST /run", kind=SpanKind.CLIENT) as client:
            client.set_attribute(names.ROLLOUT_ID, 17)  # not a string: stored as text
            client.set_status(Status(StatusCode.ERROR, "upstream said no"))
        with tracer.start_as_current_span(names.SPAN_ROLLOUT, kind=SpanKind.SERVER):
            pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def test_sdk_spans_give_the_same_rows_as_the_message_path(
    reader: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _sdk_request()
    reference = _reference(body, _registry())
    monkeypatch.setattr(reader, "to_rows", _no_fallback)  # the wire reader reads it all
    wire = _wire(reader, body, _registry())
    assert isinstance(wire, SpanBatch)
    assert wire == reference
    assert len(wire.spans) == 4 and len(wire.links) == 1 and len(wire.dispatches) == 1
    dispatch = next(row for row in wire.spans if row[3] == names.SPAN_DISPATCH)
    assert dispatch[14] is not None and "retry" in dispatch[14]  # its events were read


def _no_fallback(*_args: object) -> SpanBatch:
    raise AssertionError("the wire reader handed a regular request to the message path")


def test_repeated_fields_unknown_fields_and_other_encodings_match(reader: ModuleType) -> None:
    request = ExportTraceServiceRequest.FromString(_sdk_request())
    span = request.resource_spans[0].scope_spans[0].spans[3]
    span.attributes.append(KeyValue(key=names.ROLLOUT_ID, value=AnyValue(string_value="later")))
    span.attributes.append(KeyValue(key="bytes", value=AnyValue(bytes_value=b"\x00\xff")))
    span.attributes.append(KeyValue(key="empty"))
    span.kind = 5
    body = request.SerializeToString()
    extras = [
        b"\xfa\x07\x03abc",  # an unknown length-delimited field (255)
        b"\xf8\x07\x05",  # an unknown varint field
        b"\x7a\x05\x12\x03two",  # a second Status: protobuf merges the two messages
        b"\x30\x02",  # kind again: the last one wins
    ]
    for extra in extras:
        edited = ExportTraceServiceRequest.FromString(body)
        raw = edited.resource_spans[0].scope_spans[0].spans[3].SerializeToString() + extra
        encoded = _splice_span(edited, 3, raw)
        wire, reference = _wire(reader, encoded, _registry()), _reference(encoded, _registry())
        assert wire == reference, extra


def _splice_span(request: ExportTraceServiceRequest, index: int, raw: bytes) -> bytes:
    """``request`` with span ``index`` of its first scope encoded as ``raw`` byte for byte."""
    scope = request.resource_spans[0].scope_spans[0]
    spans = list(scope.spans)
    del scope.spans[:]
    parts = [s.SerializeToString() for s in spans]
    parts[index] = raw
    scope_bytes = scope.SerializeToString() + b"".join(
        b"\x12" + _varint(len(part)) + part for part in parts
    )
    resource_spans = request.resource_spans[0]
    del resource_spans.scope_spans[:]
    resource_bytes = resource_spans.SerializeToString() + b"\x12" + _varint(len(scope_bytes))
    resource_bytes += scope_bytes
    return b"\x0a" + _varint(len(resource_bytes)) + resource_bytes


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_damaged_bytes_get_the_same_rows_or_the_same_refusal(reader: ModuleType, seed: int) -> None:
    body = _sdk_request()
    rng = random.Random(seed)
    for _ in range(150):
        damaged = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = bytes(damaged[: rng.randrange(len(damaged) + 1)] if rng.random() < 0.3 else damaged)
        wire, reference = _wire(reader, cut, _registry()), _reference(cut, _registry())
        assert wire == reference


def test_a_span_with_a_short_id_is_refused_like_the_message_path(reader: ModuleType) -> None:
    request = ExportTraceServiceRequest.FromString(_sdk_request())
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01\x02"
    body = request.SerializeToString()
    assert _wire(reader, body, _registry()) == _reference(body, _registry())
    assert str(_wire(reader, body, _registry())).startswith("refused: span with invalid")


def test_the_store_decodes_with_the_compiled_readers_only_while_they_are_current(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiled = _compiled_or_skip()
    monkeypatch.delenv(native.PURE_PYTHON_ENV, raising=False)  # however the suite was started
    assert [module.SOURCE_DIGEST for module in compiled] == [native.source_digest()] * 3
    assert native.choose_readers() == compiled
    # a source edited since the build: the stale binaries are refused, saying how to rebuild
    monkeypatch.setattr(native, "source_digest", lambda: "0" * 64)
    assert native.compiled_readers() is None
    assert native.choose_readers() == (span_rows, wire_rows, record_rows)
    assert "pip install -e ." in caplog.text
    monkeypatch.setattr(native, "source_digest", lambda: compiled[1].SOURCE_DIGEST)
    monkeypatch.setenv(native.PURE_PYTHON_ENV, "1")
    assert native.choose_readers() == (span_rows, wire_rows, record_rows)


def test_the_compiled_message_path_gives_the_same_rows() -> None:
    compiled = _compiled_or_skip()
    request = parse_traces(_sdk_request(), PROTOBUF_TYPE)
    assert compiled[0].to_rows(request, _registry()) == to_rows(request, _registry())
