"""Forwarding a tail-sampled run's kept spans from its store: each span leaves as it was made
(ids, parent, kind, times, status, attributes, events, links, resource, scope); a refused
batch pauses the sending, counted, and a backend that answers again gets the rest."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.telemetry.sampling_tail import TailPolicy, TailSampler
from rollgym.tracestore.store_process import start_trace_store
from rollgym.tracestore.tail_forward import Exporter, Forwarded, Sender
from rollgym.tracestore.tail_stream import TailStream
from synthetic_run import emit_run


def forward_spans(db: Path, exporter: Exporter, since: int, batch: int = 512) -> Forwarded:
    """A session's end with nothing decided: every span it stored, sent."""
    sampler = TailSampler(TailPolicy(), queue_decisions=True)
    stream = TailStream(
        db, sampler, grace_s=0.0, since_ns=since, sender=Sender(exporter), batch=batch
    )
    stream.finish([])
    assert stream.end_error is None and stream.round_errors == 0, stream.last_error
    return stream.sender.counts if stream.sender else Forwarded()


class _Tee(SpanExporter):
    """Sends each batch to the store and keeps the spans as they were made."""

    def __init__(self, store: OTLPSpanExporter, made: InMemorySpanExporter) -> None:
        self._store, self._made = store, made

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._made.export(spans)
        return self._store.export(spans)

    def shutdown(self) -> None:
        self._store.shutdown()


def _what(span: ReadableSpan) -> tuple[object, ...]:
    return (
        span.context.trace_id,
        span.context.span_id,
        span.parent.span_id if span.parent else None,
        span.name,
        span.kind,
        span.start_time,
        span.end_time,
        span.status.status_code,
        span.status.description,
        dict(span.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        [(k.context.trace_id, k.context.span_id, dict(k.attributes or {})) for k in span.links],
        dict(span.resource.attributes),
        span.instrumentation_scope.name if span.instrumentation_scope else None,
    )


def test_every_span_is_forwarded_as_it_was_made(tmp_path: Path) -> None:
    made = InMemorySpanExporter()
    since = time.time_ns() - 10**9
    process = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        emit_run(
            lambda: _Tee(OTLPSpanExporter(endpoint=process.traces_endpoint), made), rollouts=12
        )
    finally:
        assert process.stop() == 0
    sent = InMemorySpanExporter()
    result = forward_spans(tmp_path / "traces.db", sent, since)
    originals = {s.context.span_id: _what(s) for s in made.get_finished_spans()}
    forwarded = {s.context.span_id: _what(s) for s in sent.get_finished_spans()}
    assert result.spans_sent == len(originals) and result.spans_failed == 0
    assert forwarded.keys() == originals.keys()
    for span_id, original in originals.items():
        assert forwarded[span_id] == original


def test_spans_of_earlier_sessions_stay_and_a_failing_backend_is_counted(tmp_path: Path) -> None:
    process = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        emit_run(lambda: OTLPSpanExporter(endpoint=process.traces_endpoint), rollouts=3)
    finally:
        assert process.stop() == 0

    class Refusing(InMemorySpanExporter):
        calls = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            Refusing.calls += 1
            return SpanExportResult.FAILURE

    assert (
        forward_spans(
            tmp_path / "traces.db", InMemorySpanExporter(), time.time_ns() + 10**12
        ).spans_sent
        == 0
    )
    failed = forward_spans(tmp_path / "traces.db", Refusing(), 0, batch=8)  # several batches
    assert failed.spans_sent == 0 and failed.spans_failed > 8
    assert Refusing.calls == 1  # after a refused batch the rest is counted, not sent


class _Backend(InMemorySpanExporter):
    """Keeps what it accepts; refuses while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        return SpanExportResult.FAILURE if self.down else super().export(spans)


def test_a_backend_down_costs_one_batch_a_pause_and_gets_what_comes_after_it() -> None:
    now = [0.0]
    backend = _Backend()
    sender = Sender(backend, pause_s=30.0, max_pause_s=100.0, clock=lambda: now[0])
    spans = [ReadableSpan(name=f"s{i}") for i in range(4)]
    assert sender.send(spans[:1])
    backend.down = True
    assert not sender.send(spans[1:2])  # refused: counted failed, the pause begins
    assert not sender.send(spans[2:3])  # in the pause: counted failed, not sent
    assert backend.calls == 2
    now[0] = 31.0
    assert not sender.send(spans[2:3])  # tried once more: refused, a pause twice as long
    now[0] = 31.0 + 59.0
    assert not sender.send(spans[3:4]) and backend.calls == 3
    backend.down = False
    now[0] = 31.0 + 61.0
    assert sender.send(spans[3:4])  # back: sent, and the pause is over
    assert sender.send(spans[:1])
    assert sender.counts == Forwarded(spans_sent=3, spans_failed=4, spans_late=0)
