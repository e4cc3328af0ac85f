"""rollgym's own span pipeline: same spans as the SDK, same bytes on the wire, loss counted.

The round-trip tests drive the SDK's TracerProvider and our RecordingTracerProvider through the
same API calls with the same ids and times, then compare what the SDK's OTLP encoder makes of
the SDK spans with what our encoder (the exporter child's) makes of our records, both parsed
back with ``opentelemetry-proto``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import marshal
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rollgym.telemetry import spans
from rollgym.telemetry.groups import ALL_GROUPS
from rollgym.telemetry.pipeline import records as R
from rollgym.telemetry.pipeline import shipper as shipper_module
from rollgym.telemetry.pipeline.frames import pack_batch, unpack_frame
from rollgym.telemetry.pipeline.in_process import InProcessExport
from rollgym.telemetry.pipeline.readable import readable_span
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.pipeline.wire import encode_request
from rollgym.telemetry.sampling import SingleTraceIdGenerator
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import setup_telemetry
from rollgym.tracestore.store_process import start_trace_store
from waits import wait_for

RESOURCE = {"service.name": "rollgym-test", "gym.run.id": "run-1"}
#: The context key the API keeps the current span under (read through the API, as the code does).
_SPAN_SLOT = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, context_api.Context())))
T0 = 1_700_000_000_000_000_000


def _two(counts: dict) -> dict:
    """The delivered/dropped pair of a span-count record (it also has unknown and reasons)."""
    return {key: counts[key] for key in ("spans_exported", "spans_dropped")}


class _CountingIds(IdGenerator):
    """The same id sequence for both providers, so their spans can be compared field by field."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def generate_span_id(self) -> int:
        return 0x1000 + next(self._next)

    def generate_trace_id(self) -> int:
        return 0xABC0_0000 + next(self._next)


def _scenario(tracer: trace.Tracer) -> None:
    """Every API feature our spans must carry: nesting, kinds, links, events, status, remote."""
    remote = TraceContextTextMapPropagator().extract(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    )
    root = tracer.start_span(
        "gym.job",
        attributes={
            "gym.run.id": "run-1",
            "n": 3,
            "ok": True,
            "neg": -5,
            "no": False,
            "uni": "é✓",
            "floats": (1.5, -2.5),
            "ints": [1, -2],
            "big": 2**62,
        },
        start_time=T0,
    )
    token = context_api.attach(trace.set_span_in_context(root))
    try:
        child = tracer.start_span(
            "POST /run",
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": "POST", "server.port": 8000, "x": 1.5},
            links=[Link(root.get_span_context(), {"why": "job"})],
            start_time=T0 + 10,
        )
        child.set_attribute("tags", ["a", "b"])
        child.set_attributes({"gym.rollout.reward": 1.0, "gym.rollout.outcome": "ok"})
        child.add_event("retry", {"attempt": 2}, timestamp=T0 + 15)
        child.set_status(Status(StatusCode.ERROR, "timeout"))
        child.update_name("POST /run/{id}")
        child.end(T0 + 20)
        server = tracer.start_span("GET /x", context=remote, kind=SpanKind.SERVER, start_time=T0)
        server.set_status(StatusCode.OK)
        server.set_status(StatusCode.ERROR, "ignored after OK")
        server.end(T0 + 30)
    finally:
        context_api.detach(token)
    root.end(T0 + 40)


def _sdk_spans() -> tuple[ReadableSpan, ...]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource(RESOURCE), id_generator=_CountingIds(), shutdown_on_exit=False
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _scenario(provider.get_tracer("rollgym", "1.0"))
    return exporter.get_finished_spans()


def _sdk_request() -> ExportTraceServiceRequest:
    out = ExportTraceServiceRequest()
    out.ParseFromString(encode_spans(_sdk_spans()).SerializeToString())
    return out


def _our_records() -> list[R.SpanRecord]:
    records: list[R.SpanRecord] = []
    provider = RecordingTracerProvider(records.append, id_generator=_CountingIds())
    _scenario(provider.get_tracer("rollgym", "1.0"))
    return records


def test_our_encoding_of_our_spans_equals_the_sdk_encoding_of_sdk_spans() -> None:
    # what crosses the pipe: each record packed as its span ended, a frame of them
    records = unpack_frame(pack_batch(_our_records()))
    ours = ExportTraceServiceRequest()
    ours.ParseFromString(encode_request(RESOURCE, records))
    theirs = _sdk_request()
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 3
    # Field by field first (a readable failure), then the whole message.
    for mine, sdk in zip(
        ours.resource_spans[0].scope_spans[0].spans,
        theirs.resource_spans[0].scope_spans[0].spans,
        strict=True,
    ):
        assert mine == sdk, f"{mine.name}:\n{mine}\n!=\n{sdk}"
    assert ours == theirs


def test_our_records_as_readable_spans_are_what_the_sdk_exporters_get_from_sdk_spans() -> None:
    """The in-process exporter side (gRPC, console, tests) hands the SDK's exporters
    ``ReadableSpan`` s made from records: the SDK's encoder makes the same OTLP of them as
    of the SDK's own spans, and the console exporter the same text."""
    records = _our_records()
    readable = [readable_span(r, Resource(RESOURCE)) for r in records]
    ours = ExportTraceServiceRequest()
    ours.ParseFromString(encode_spans(readable).SerializeToString())
    theirs = _sdk_request()
    for mine, sdk in zip(
        ours.resource_spans[0].scope_spans[0].spans,
        theirs.resource_spans[0].scope_spans[0].spans,
        strict=True,
    ):
        assert mine == sdk, f"{mine.name}:\n{mine}\n!=\n{sdk}"
    assert ours == theirs
    sdk_spans = _sdk_spans()
    for mine_span, sdk_span in zip(readable, sdk_spans, strict=True):
        assert mine_span.to_json() == sdk_span.to_json()
        assert mine_span.attributes == sdk_span.attributes


def test_unencodable_values_lose_only_their_attribute() -> None:
    (record,) = _records_of(lambda t: t.start_span("s", attributes={"big": 2**70, "ok": 1}).end())
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode_request(RESOURCE, [record]))
    (span,) = request.resource_spans[0].scope_spans[0].spans
    assert [kv.key for kv in span.attributes] == ["ok"]


def _records_of(body: Callable[[trace.Tracer], None], **kw: Any) -> list[R.SpanRecord]:
    records: list[R.SpanRecord] = []
    body(RecordingTracerProvider(records.append, **kw).get_tracer("rollgym"))
    return records


def test_attribute_values_are_checked_and_copied_as_the_span_starts() -> None:
    class Opaque:
        pass

    listed = ["a", "b"]
    (record,) = _records_of(
        lambda t: t.start_span("s", attributes={"bad": Opaque(), "good": "x", "l": listed}).end()
    )
    listed.append("changed later")  # the record is packed after the span ended: a copy
    assert record[R.ATTRIBUTES] == {"good": "x", "l": ("a", "b")}
    assert marshal.loads(marshal.dumps([record]))[0][R.NAME] == "s"


def test_a_record_marshal_refuses_costs_only_its_own_span(tmp_path: Path) -> None:
    class Opaque:
        pass

    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        shipper = _shipper(url=f"{store.endpoint}/v1/traces", timeout_s=10.0)
        provider = RecordingTracerProvider(shipper.on_end, on_flush=shipper.flush)
        tracer = provider.get_tracer("rollgym")
        tracer.start_span("bad", attributes={"bad": Opaque(), "good": "x"}).end()
        unpackable = tracer.start_span("renamed")
        unpackable.update_name(Opaque())  # type: ignore[arg-type]  # the API does not check
        unpackable.end()
        tracer.start_span("fine", attributes={"n": 1}).end()
        assert provider.force_flush(30_000)
        shipper.shutdown(timeout_s=10.0)
        counts = shipper.counts.snapshot()
        assert counts["spans_exported"] == 2
        assert counts["spans_dropped_by_reason"] == {"export_failed": 1}
    finally:
        store.stop()
    with sqlite3.connect(tmp_path / "traces.db") as db:
        rows = dict(db.execute("SELECT name, attributes FROM spans"))
    assert json.loads(rows["bad"]) == {"good": "x"} and json.loads(rows["fine"]) == {"n": 1}


def test_unsampled_spans_are_not_recording_and_never_reach_the_sink() -> None:
    def body(tracer: trace.Tracer) -> None:
        span = tracer.start_span("dropped")
        assert isinstance(span, NonRecordingSpan) and not span.is_recording()
        assert span.get_span_context().is_valid and not span.get_span_context().trace_flags.sampled
        span.end()

    assert _records_of(body, sampler=ALWAYS_OFF) == []
    kept = _records_of(
        lambda t: [t.start_span(f"s{i}").end() for i in range(400)],
        sampler=TraceIdRatioBased(0.5),
    )
    assert 100 < len(kept) < 300  # each root decided by its trace id, as the SDK decides


def test_children_follow_the_parents_sampling_decision() -> None:
    def body(tracer: trace.Tracer) -> None:
        unsampled = NonRecordingSpan(
            SpanContext(trace_id=5, span_id=6, is_remote=True, trace_flags=trace.TraceFlags(0))
        )
        with trace.use_span(unsampled):
            child = tracer.start_span("child")
            assert not child.is_recording()
            assert child.get_span_context().trace_id == 5
        child.end()

    assert _records_of(body) == []


def test_parents_of_every_kind_are_found_as_the_api_finds_them() -> None:
    """Our own spans and ``NonRecordingSpan`` s are read directly; any other ``Span`` (here an
    SDK span) goes through ``get_current_span``; a non-span value in the slot is no parent."""
    sdk_parent = TracerProvider(shutdown_on_exit=False).get_tracer("t").start_span("sdk")

    def body(tracer: trace.Tracer) -> None:
        own = tracer.start_span("own")
        for parent in (own, sdk_parent, NonRecordingSpan(sdk_parent.get_span_context())):
            with trace.use_span(parent):
                tracer.start_span("child").end()
            tracer.start_span("explicit", context=trace.set_span_in_context(parent)).end()
        own.end()
        token = context_api.attach(context_api.set_value(_SPAN_SLOT, "not a span"))
        try:
            tracer.start_span("orphan").end()
        finally:
            context_api.detach(token)

    records = _records_of(body)
    own_record = next(r for r in records if r[R.NAME] == "own")
    parents = [
        (r[R.TRACE_ID], r[R.PARENT_SPAN_ID]) for r in records if r[R.NAME] in ("child", "explicit")
    ]
    sdk = sdk_parent.get_span_context()
    own_parent = (own_record[R.TRACE_ID], own_record[R.SPAN_ID])
    sdk_pair = (sdk.trace_id, sdk.span_id)
    assert parents == [own_parent, own_parent, sdk_pair, sdk_pair, sdk_pair, sdk_pair]
    (orphan,) = (r for r in records if r[R.NAME] == "orphan")
    assert orphan[R.PARENT_SPAN_ID] == 0


def test_single_trace_mode_gives_every_root_the_run_trace_id() -> None:
    records = _records_of(
        lambda t: [t.start_span("root").end() for _ in range(3)],
        id_generator=SingleTraceIdGenerator(1234),
    )
    assert {r[R.TRACE_ID] for r in records} == {1234}
    assert len({r[R.SPAN_ID] for r in records}) == 3


def test_roots_get_time_ordered_trace_ids() -> None:
    before = int(time.time())
    records = _records_of(lambda t: [t.start_span("root").end() for _ in range(50)])
    after = int(time.time())
    assert all(before <= r[R.TRACE_ID] >> 96 <= after for r in records)
    assert len({r[R.TRACE_ID] for r in records}) == 50  # 96 random bits below the second
    assert len({r[R.TRACE_ID] & (1 << 64) - 1 for r in records}) == 50


def test_record_exception_and_current_span_as_the_api_promises() -> None:
    def body(tracer: trace.Tracer) -> None:
        with pytest.raises(KeyError), tracer.start_as_current_span("work") as span:
            assert trace.get_current_span() is span
            raise KeyError("k")
        assert not span.is_recording()
        span.set_attribute("late", 1)  # after end: ignored, as in the SDK

    (record,) = _records_of(body)
    assert record[R.STATUS_CODE] == StatusCode.ERROR.value
    (event,) = record[R.EVENTS]
    assert event[0] == "exception" and event[2]["exception.type"] == "KeyError"
    assert "late" not in record[R.ATTRIBUTES]


def test_use_span_flags_reach_use_span_by_position_or_by_name() -> None:
    """``start_as_current_span`` passes ``start_span``'s arguments on and keeps the last three
    (record_exception, set_status_on_exception, end_on_exit) for ``use_span``."""
    kept_open: list[trace.Span] = []

    def body(tracer: trace.Tracer) -> None:
        with tracer.start_as_current_span("by-name", end_on_exit=False) as span:
            kept_open.append(span)
        assert span.is_recording()
        span.end()
        positional = (None, SpanKind.CLIENT, {"a": 1}, None, None, False, False)
        with pytest.raises(KeyError), tracer.start_as_current_span("quiet", *positional):
            raise KeyError("k")

    records = {r[R.NAME]: r for r in _records_of(body)}
    assert set(records) == {"by-name", "quiet"}
    quiet = records["quiet"]
    assert quiet[R.KIND] == SpanKind.CLIENT.value and quiet[R.ATTRIBUTES] == {"a": 1}
    assert quiet[R.EVENTS] is None and quiet[R.STATUS_CODE] == StatusCode.UNSET.value


def test_records_carry_the_parents_ids_remoteness_and_trace_state() -> None:
    """A child of our own span is read from the span's slots, a child of a remote context from
    the context: both records name the parent, its remoteness and the inherited trace state."""
    state = trace.TraceState([("vendor", "x")])
    remote = SpanContext(7, 8, is_remote=True, trace_flags=trace.TraceFlags(1), trace_state=state)

    def body(tracer: trace.Tracer) -> None:
        with (
            trace.use_span(NonRecordingSpan(remote)),
            tracer.start_as_current_span("server") as server,
        ):
            assert server.get_span_context().trace_state == state
            with tracer.start_as_current_span("inner") as inner:
                assert inner.get_span_context().trace_state == state
                assert inner.get_span_context().trace_flags.sampled

    records = {r[R.NAME]: r for r in _records_of(body)}
    server, inner = records["server"], records["inner"]
    assert (server[R.TRACE_ID], server[R.PARENT_SPAN_ID], server[R.PARENT_IS_REMOTE]) == (
        7,
        8,
        True,
    )
    assert (inner[R.TRACE_ID], inner[R.PARENT_SPAN_ID], inner[R.PARENT_IS_REMOTE]) == (
        7,
        server[R.SPAN_ID],
        False,
    )
    assert server[R.TRACE_STATE] == inner[R.TRACE_STATE] == (("vendor", "x"),)


def _shipper(**kw: Any) -> SpanShipper:
    base: dict[str, Any] = {
        "url": "http://127.0.0.1:9/v1/traces",
        "headers": None,
        "resource": RESOURCE,
        "timeout_s": 1.0,
        "schedule_delay_ms": 10,
    }
    return SpanShipper(**{**base, **kw})


def _record(i: int) -> R.SpanRecord:
    return (
        1,
        i + 1,
        0,
        False,
        "s",
        0,
        T0,
        T0 + 1,
        {},
        None,
        None,
        0,
        None,
        ("rollgym", None, None),
        None,
    )


def test_a_stalled_child_fills_the_queue_and_drops_are_counted_without_blocking() -> None:
    stalled = [sys.executable, "-c", "import time; time.sleep(120)"]  # never reads its input
    shipper = _shipper(command=stalled, max_queue_size=50, max_export_batch_size=10)
    payload = "x" * 2000  # ~2 kB a span: the pipe's buffer holds a few dozen at most
    for i in range(5000):
        shipper.on_end((*_record(i)[:8], {"p": payload}, *_record(i)[9:]))
    dropped = shipper.counts.dropped["queue_full"]
    assert dropped > 0
    shipper.shutdown(timeout_s=2.0)  # the child is killed: everything left is counted
    shipper.counts.close()
    counts = shipper.counts.snapshot()
    assert _two(counts) == {"spans_exported": 0, "spans_dropped": 5000}


class _StalledExporter(InMemorySpanExporter):
    """An SDK exporter that holds every export until it is let go, then stores the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.let_go.wait(60)
        return super().export(spans)


def test_in_process_a_stalled_exporter_fills_the_queue_and_everything_is_counted_once() -> None:
    """The in-process exporter side counts as the shipper does: a full queue drops the new
    span at once (the caller never waits), and what was queued is exported when the
    exporter moves again; every span ends in exactly one tally."""
    exporter = _StalledExporter()
    export = InProcessExport(
        exporter,
        Resource(RESOURCE),
        max_queue_size=50,
        max_export_batch_size=10,
        schedule_delay_ms=5,
    )
    for i in range(500):
        export.on_end(_record(i))
    assert export.counts.dropped["queue_full"] >= 500 - 50 - 10
    exporter.let_go.set()
    assert export.flush(60.0)
    export.shutdown()
    export.counts.close()
    counts = export.counts.snapshot()
    assert counts["spans_exported"] == len(exporter.get_finished_spans())
    assert counts["spans_exported"] + counts["spans_dropped"] == 500
    assert counts["spans_dropped_by_reason"] == {"queue_full": counts["spans_dropped"]}
    spans_out = exporter.get_finished_spans()
    ids = [s.context.span_id for s in spans_out]
    assert len(set(ids)) == len(ids)  # none exported twice
    assert set(ids) <= {_record(i)[R.SPAN_ID] for i in range(500)}
    assert spans_out[0].resource.attributes["gym.run.id"] == "run-1"


class _OtlpBodies(InMemorySpanExporter):
    """An SDK exporter that encodes each batch as the SDK's OTLP exporters do (protobuf, which
    refuses a text that is not valid Unicode) and keeps the bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bodies.append(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS


@pytest.mark.parametrize("synchronous", [True, False])
def test_in_process_a_lone_surrogate_is_sent_made_valid(synchronous: bool) -> None:
    """Batched or synchronous, a span holding lone surrogates (user code can set them) is
    exported with U+FFFD in their place, and the span beside it in the batch too."""
    exporter = _OtlpBodies()
    export = InProcessExport(exporter, Resource(RESOURCE), synchronous=synchronous)
    tracer = RecordingTracerProvider(export.on_end).get_tracer("rollgym")
    tracer.start_span("fine").end()
    tracer.start_span("tool\ud800", attributes={"answer": "a\udc00b"}).end()
    assert export.flush(30.0)
    export.shutdown()
    request = ExportTraceServiceRequest()
    spans_out = []
    for body in exporter.bodies:
        request.ParseFromString(body)
        spans_out += list(request.resource_spans[0].scope_spans[0].spans)
    assert sorted(span.name for span in spans_out) == ["fine", "tool\ufffd"]
    (bad,) = [span for span in spans_out if span.name != "fine"]
    assert [(kv.key, kv.value.string_value) for kv in bad.attributes] == [("answer", "a\ufffdb")]
    assert export.counts.snapshot()["spans_exported"] == 2


def test_a_dead_child_drops_and_counts_and_never_blocks() -> None:
    shipper = _shipper()
    os.kill(shipper.child_pid, signal.SIGKILL)
    assert wait_for(lambda: shipper._dead)
    for i in range(300):
        shipper.on_end(_record(i))
    shipper.shutdown(timeout_s=10.0)
    shipper.counts.close()
    assert _two(shipper.counts.snapshot()) == {"spans_exported": 0, "spans_dropped": 300}
    assert shipper.counts.dropped["export_failed"] == 300


def test_setup_uses_the_child_for_otlp_http_and_exports_in_process_otherwise(
    monkeypatch: pytest.MonkeyPatch, unreachable_otlp: TelemetrySettings
) -> None:
    """One provider for every destination: OTLP/HTTP goes through the exporter child; the
    console, and OTLP/HTTP when the child cannot start, are the same records exported
    in-process."""
    handle = setup_telemetry(unreachable_otlp, service_name="t", run_id="r")
    try:
        assert isinstance(handle.processor, SpanShipper)
        with spans.rollout_span("1-0") as span:
            assert span.is_recording()
    finally:
        handle.shutdown(10.0)
    assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 1}
    console = dataclasses.replace(unreachable_otlp, traces_exporter="console")
    handle = setup_telemetry(console, service_name="t", run_id="r")
    try:
        assert isinstance(handle.tracer_provider, RecordingTracerProvider)
        assert isinstance(handle.processor, InProcessExport)
    finally:
        handle.shutdown(10.0)

    def no_child(command: object = None) -> object:
        raise OSError("no child here")

    monkeypatch.setattr(shipper_module, "start_exporter", no_child)
    handle = setup_telemetry(unreachable_otlp, service_name="t", run_id="r")
    try:
        assert isinstance(handle.tracer_provider, RecordingTracerProvider)
        assert isinstance(handle.processor, InProcessExport)
        with spans.rollout_span("1-0") as span:
            assert span.is_recording()
    finally:
        handle.shutdown(10.0)
    # the same record, counted once, lost to the unreachable endpoint
    assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 1}
    assert handle.counts()["spans_dropped_by_reason"] == {"export_failed": 1}


def test_otlp_grpc_goes_through_the_exporter_child_to_a_real_grpc_receiver() -> None:
    """OTLP/gRPC: the child hands the records to the SDK's gRPC exporter; a gRPC receiver on
    loopback gets every span whole, with the run's resource, and the counts say so."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received: list[tuple[str, dict[str, str]]] = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
            for resource_spans in request.resource_spans:
                identity = {
                    kv.key: kv.value.string_value for kv in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    received.extend((span.name, identity) for span in scope_spans.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        settings = TelemetrySettings(
            groups=ALL_GROUPS,
            traces_exporter="otlp",
            protocol="grpc",
            endpoint=f"http://127.0.0.1:{port}",
            export_timeout_s=10,
            schedule_delay_ms=10,
        )
        handle = setup_telemetry(settings, service_name="t", run_id="run-g")
        try:
            assert isinstance(handle.processor, SpanShipper)
            for i in range(5):
                with spans.rollout_span(f"{i}-0"):
                    pass
        finally:
            handle.shutdown(30.0)
    finally:
        server.stop(None)
    assert handle.counts()["spans_exported"] == 5 == len(received)
    assert {name for name, _ in received} == {"gym.rollout"}
    assert all(identity["gym.run.id"] == "run-g" for _, identity in received)


@pytest.mark.parametrize("flags", [0, 1])
@pytest.mark.parametrize("state", ["", "vendor=x,other=y"])
def test_fast_injection_writes_what_the_propagator_writes(flags: int, state: str) -> None:
    from opentelemetry import baggage, propagate
    from opentelemetry.trace import TraceState

    from rollgym.telemetry.context import inject_span

    span_context = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=trace.TraceFlags(flags),
        trace_state=TraceState.from_header([state]) if state else None,
    )
    for ctx in (None, baggage.set_baggage("k", "v")):  # with baggage: the propagator's path
        token = context_api.attach(trace.set_span_in_context(NonRecordingSpan(span_context), ctx))
        try:
            fast: dict[str, str] = {}
            sent = inject_span(fast, span_context)
            reference: dict[str, str] = {}
            propagate.inject(reference)
        finally:
            context_api.detach(token)
        assert fast == reference
        assert sent == "0af7651916cd43dd8448eb211c80319c"  # the trace id that went out


def test_force_flush_waits_until_every_span_has_an_outcome() -> None:
    shipper = _shipper(schedule_delay_ms=60_000)  # only a flush or a full batch ships
    provider = RecordingTracerProvider(shipper.on_end, on_flush=shipper.flush)
    tracer = provider.get_tracer("rollgym")
    for i in range(20):
        tracer.start_span(f"s{i}").end()
    try:
        assert provider.force_flush(30_000)
        # Nothing listens on the endpoint: all 20 were tried and counted, before shutdown.
        assert shipper.counts.dropped["export_failed"] == 20
    finally:
        shipper.shutdown(timeout_s=10.0)


def _counted_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs each shutdown probe asks about, in order, with a 0.3 s grace."""
    from rollgym.telemetry import endpoint_probe
    from rollgym.telemetry.pipeline import shipper as shipper_module

    calls: list[str] = []
    real = endpoint_probe.unreachable

    def counted(url: str, timeout_s: float = 1.0) -> str | None:
        calls.append(url)
        return real(url, timeout_s=timeout_s)

    monkeypatch.setattr(endpoint_probe, "unreachable", counted)
    monkeypatch.setattr(shipper_module, "SHUTDOWN_PROBE_S", 0.3)
    return calls


def _probes_at_shutdown(monkeypatch: pytest.MonkeyPatch, rollouts_ended_first: bool) -> int:
    """How many times a shutdown with one unsent span asks whether the endpoint listens."""
    calls = _counted_probes(monkeypatch)
    shipper = _shipper(patience_s=60.0)  # the child keeps the failing batch, unanswered
    shipper.on_end(_record(0))
    ended_at = time.monotonic() if rollouts_ended_first else None
    if rollouts_ended_first:
        time.sleep(0.4)  # the servers' shutdown, during which the grace runs out
    # What the handle does at shutdown: the flush limit, and when the rollouts ended.
    shipper.stop_retrying_at(time.monotonic() + 20.0, rollouts_ended_at=ended_at)
    shipper.shutdown()
    assert shipper.gave_up_on_endpoint
    shipper.counts.close()
    assert _two(shipper.counts.snapshot()) == {"spans_exported": 0, "spans_dropped": 1}
    return len(calls)


def test_a_dead_endpoints_grace_counts_from_the_end_of_the_rollouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver shuts down after its servers: it does not wait the grace out again."""
    assert _probes_at_shutdown(monkeypatch, rollouts_ended_first=True) == 1
    assert _probes_at_shutdown(monkeypatch, rollouts_ended_first=False) >= 2


def _handle_probes_at_shutdown(monkeypatch: pytest.MonkeyPatch, note_end: bool) -> int:
    """How many times a handle's shutdown (one unsent span, nothing listening) asks whether
    the endpoint listens, when the rollouts ended 0.4 s before (``note_end``) or not."""
    from rollgym.telemetry.groups import PRESETS
    from rollgym.telemetry.setup import setup_telemetry

    calls = _counted_probes(monkeypatch)
    handle = setup_telemetry(
        TelemetrySettings(
            groups=PRESETS["default"],
            traces_exporter="otlp",
            endpoint="http://127.0.0.1:9",
            export_timeout_s=1.0,
            schedule_delay_ms=10,
        ),
        service_name="t",
        run_id="r",
    )
    if not isinstance(handle.processor, SpanShipper):
        pytest.skip("this process exports through the SDK's processor, not the span shipper")
    with spans.rollout_span("0"):
        pass
    if note_end:
        handle.note_rollouts_ended()
        time.sleep(0.4)  # the servers' shutdown, during which the grace runs out
    handle.shutdown(20.0)
    assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 1}
    return len(calls)


def test_the_handle_hands_its_end_of_rollouts_to_the_shipper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One timestamp: the grace the shipper gives a dead endpoint counts from the moment the
    handle noted the end of the rollouts (one probe), else from shutdown (probes through it)."""
    assert _handle_probes_at_shutdown(monkeypatch, note_end=True) == 1
    assert _handle_probes_at_shutdown(monkeypatch, note_end=False) >= 2


@pytest.mark.parametrize("with_span", [False, True])
@pytest.mark.parametrize("with_baggage", [False, True])
def test_inject_current_writes_what_the_propagator_writes(with_span, with_baggage) -> None:
    """The short way for the current context (no client span) sends the propagator's exact
    headers: nothing at all for a context with neither a valid span nor baggage."""
    from opentelemetry import baggage, propagate

    from rollgym.telemetry.context import inject_current

    span_context = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=trace.TraceFlags(1),
    )
    ctx = baggage.set_baggage("k", "v") if with_baggage else context_api.Context()
    if with_span:
        ctx = trace.set_span_in_context(NonRecordingSpan(span_context), ctx)
    token = context_api.attach(ctx)
    try:
        fast: dict[str, str] = {}
        sent = inject_current(fast)
        reference: dict[str, str] = {}
        propagate.inject(reference)
    finally:
        context_api.detach(token)
    assert fast == reference
    assert ("traceparent" in fast) is with_span
    assert ("baggage" in fast) is with_baggage
    assert sent == ("0af7651916cd43dd8448eb211c80319c" if with_span else None)
