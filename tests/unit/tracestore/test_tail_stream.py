"""The tail stream's rounds against a live store: a kept trace is sent a grace period after its
decision, its late spans in a later round or at the end, each exactly once; a dropped trace
leaves the store in its round, its late spans after it; and the rows whose numbers a removal
freed (new rows take them again) are neither lost nor sent twice."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext

from rollgym.telemetry.sampling_tail import AttemptEnd, TailPolicy, TailSampler
from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
from rollgym.tracestore.tail_forward import Sender
from rollgym.tracestore.tail_stream import TailStream


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStoreProcess]:
    process = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        yield process
    finally:
        assert process.stop() == 0


class _Process:
    """One exporting process: every span stored (committed) once it ends."""

    def __init__(self, endpoint: str) -> None:
        self.provider = TracerProvider(resource=Resource({"service.name": "test"}))
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self.tracer = self.provider.get_tracer("test")
        self.made: list[tuple[int, int]] = []  # (trace id, span id)

    def root(self, name: str) -> SpanContext:
        with self.tracer.start_as_current_span(name) as span:
            context = span.get_span_context()
        self.made.append((context.trace_id, context.span_id))
        return context

    def child(self, parent: SpanContext, name: str) -> None:
        ctx = trace.set_span_in_context(NonRecordingSpan(parent))
        with self.tracer.start_as_current_span(name, context=ctx) as span:
            context = span.get_span_context()
        self.made.append((context.trace_id, context.span_id))


def _stored(db: Path) -> Counter[int]:
    """Spans in the store per trace id."""
    with sqlite3.connect(db) as conn:
        return Counter(
            int.from_bytes(t, "big") for (t,) in conn.execute("SELECT trace_id FROM spans")
        )


def _hex(context: SpanContext) -> str:
    return format(context.trace_id, "032x")


def test_kept_traces_go_and_dropped_ones_leave_each_span_once_late_ones_too(
    store: TraceStoreProcess, tmp_path: Path
) -> None:
    db = tmp_path / "traces.db"
    since = time.time_ns()
    process = _Process(store.traces_endpoint)
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None), queue_decisions=True)
    backend = InMemorySpanExporter()
    stream = TailStream(db, sampler, grace_s=0.0, since_ns=since, sender=Sender(backend), batch=2)

    kept = process.root("kept")
    process.child(kept, "kept.child")
    dropped = process.root("dropped")
    process.child(dropped, "dropped.child")
    undecided = process.root("undecided")  # decided after the first round
    assert sampler.decide(AttemptEnd(_hex(kept), failed=True)) is True
    assert sampler.decide(AttemptEnd(_hex(dropped))) is False

    stream.round(time.monotonic())  # both due: kept sent, dropped removed
    sent = Counter((s.context.trace_id, s.context.span_id) for s in backend.get_finished_spans())
    assert {t for t, _ in sent} == {kept.trace_id} and sum(sent.values()) == 2
    assert dropped.trace_id not in _stored(db)
    assert stream.removed.spans_before_end == 2

    # late spans: the kept trace's, then the dropped one's (the last row in the store)
    process.child(kept, "kept.late")
    process.child(dropped, "dropped.late")
    stream.round(time.monotonic())
    assert dropped.trace_id not in _stored(db)
    assert stream.forwarded is not None and stream.forwarded.spans_late == 1
    # removing the last row freed its number: the next span stored takes it again
    process.child(kept, "kept.later")
    assert sampler.decide(AttemptEnd(_hex(undecided), failed=True)) is True
    stream.round(time.monotonic())
    process.child(kept, "kept.at.the.end")
    job = process.root("job")  # never decided: sent at the end, as the job trace is

    stream.finish(sampler.dropped_traces)
    assert stream.end_error is None and stream.round_errors == 0, stream.last_error
    sent = Counter((s.context.trace_id, s.context.span_id) for s in backend.get_finished_spans())
    assert max(sent.values()) == 1  # none twice
    expected = {m for m in process.made if m[0] != dropped.trace_id}
    assert set(sent) == expected  # none lost
    assert {t for t, _ in sent} == {kept.trace_id, undecided.trace_id, job.trace_id}
    assert stream.forwarded.spans_late == 3 and stream.forwarded.spans_sent == len(expected)
    assert stream.removed.spans == 3 and stream.removed.traces == 1
    assert dropped.trace_id not in _stored(db)
    process.provider.shutdown()


def test_without_a_backend_dropped_traces_leave_in_rounds_and_late_ones_at_the_end(
    store: TraceStoreProcess, tmp_path: Path
) -> None:
    db = tmp_path / "traces.db"
    process = _Process(store.traces_endpoint)
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None), queue_decisions=True)
    stream = TailStream(db, sampler, grace_s=3600.0, since_ns=time.time_ns())
    dropped = [process.root(f"d{i}") for i in range(3)]
    for context in dropped:
        sampler.decide(AttemptEnd(_hex(context)))
    stream.round(time.monotonic() - 3600.0)  # still in their grace period: nothing moves
    assert all(c.trace_id in _stored(db) for c in dropped)
    stream.round(time.monotonic() + 1.0)
    assert not any(c.trace_id in _stored(db) for c in dropped)
    process.child(dropped[0], "late")  # after the stream's last look: the end removes it
    stream.round(time.monotonic())
    process.child(dropped[1], "later")
    earlier = process.root("an earlier session's dropped trace")
    stream.finish(sampler.dropped_traces, [earlier.trace_id.to_bytes(16, "big")])
    assert stream.end_error is None
    assert not set(_stored(db)) & {c.trace_id for c in [*dropped, earlier]}
    assert (stream.removed.traces, stream.removed.spans) == (3, 5)
    assert stream.removed.spans_before_end == 4
    assert (stream.removed.earlier_traces, stream.removed.earlier_spans) == (1, 1)
    process.provider.shutdown()


def test_a_store_that_is_not_there_is_said_not_raised(tmp_path: Path) -> None:
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None), queue_decisions=True)
    sampler.decide(AttemptEnd(format(7, "032x")))
    stream = TailStream(tmp_path / "none.db", sampler, grace_s=0.0, since_ns=0)
    stream.round(time.monotonic())  # no store yet: the decision waits in its queue
    assert sampler.due(time.monotonic()) == [((7).to_bytes(16, "big"), False)]
    stream.finish(sampler.dropped_traces)
    assert stream.end_error is not None and "no trace store" in stream.end_error
    assert not (tmp_path / "none.db").exists()  # never created by the stream
