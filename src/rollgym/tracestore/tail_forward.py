"""A tail-sampled run's kept spans, read back from its store and sent to the OTLP backend.

With ``telemetry.tail_sampling`` and an OTLP endpoint, every process of the run exports to the
run's local store instead (the one place all of a rollout's spans meet, where they wait for the
driver's decision, ``docs/design/tail-sampling.md``). The run's tail stream
(:mod:`rollgym.tracestore.tail_stream`) picks which stored spans go, while the run goes and at
its end; this module turns a stored row back into the span it was (its ids, parent, kind,
times, status, attributes, events, links, resource and scope: :class:`SpanReader`) and sends
batches with the OpenTelemetry SDK's own exporter for the endpoint's protocol
(:class:`Sender`), counting every span once, sent or failed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

#: Spans per export request (the SDK's batch processor's default).
BATCH = 512
#: After a refused batch, what is due is counted failed unsent for this long; then one batch
#: is tried again. Each refusal in a row doubles it, up to :data:`MAX_PAUSE_S`.
PAUSE_S = 30.0
MAX_PAUSE_S = 600.0
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

#: The stored columns a span is rebuilt from, in :meth:`SpanReader.span`'s order.
SPAN_FIELDS = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code, "
    "status_message, resource_id, scope, attributes, events, link_count"
)


class Exporter(Protocol):
    """The part of an SDK ``SpanExporter`` forwarding uses."""

    def export(self, spans: Sequence[ReadableSpan], /) -> SpanExportResult: ...


@dataclass
class Forwarded:
    """What forwarding did: spans the backend accepted, those it did not, and of all those
    the spans of traces sent before them (late: they reached the store after their trace's
    grace period)."""

    spans_sent: int = 0
    spans_failed: int = 0
    spans_late: int = 0


class Sender:
    """Sends batches to one backend and counts each span once: sent, or failed.

    A refused batch (after the SDK exporter's own retries, within its timeout) is counted
    failed and never sent again (the backend may have stored it before failing to answer: a
    second copy would be a duplicate). What comes due during the :data:`PAUSE_S` after it is
    counted failed without being sent, so a dead backend costs one batch's retries per pause,
    never the run's time; a batch accepted ends the pause, so a backend that comes back
    receives what is decided from then on.
    """

    def __init__(
        self,
        exporter: Exporter,
        *,
        pause_s: float = PAUSE_S,
        max_pause_s: float = MAX_PAUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exporter = exporter
        self.counts = Forwarded()
        self._pause_s = pause_s
        self._max_pause_s = max_pause_s
        self._clock = clock
        self._pause = 0.0
        self._resume_at = 0.0

    @property
    def paused(self) -> bool:
        return self._clock() < self._resume_at

    def send(self, batch: Sequence[ReadableSpan], late: int = 0) -> bool:
        """One request for ``batch`` (``late`` of its spans are late); True if accepted."""
        if not batch:
            return True
        self.counts.spans_late += late
        if self.paused:
            self.counts.spans_failed += len(batch)
            return False
        try:
            ok = self.exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception:  # noqa: BLE001 - a backend's failure is counted, never raised
            ok = False
        if ok:
            self.counts.spans_sent += len(batch)
            self._pause = 0.0
            return True
        self.counts.spans_failed += len(batch)
        self._pause = min(self._max_pause_s, self._pause * 2 if self._pause else self._pause_s)
        self._resume_at = self._clock() + self._pause
        return False


class SpanReader:
    """Stored rows back into SDK spans, on one connection: resources read once each, the links
    of the spans that have some read with them."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._resources: dict[int, Resource] = {}

    def span(self, row: Sequence[object]) -> ReadableSpan:
        """``row``: the :data:`SPAN_FIELDS` of one stored span."""
        (
            trace_id,
            span_id,
            parent,
            name,
            kind,
            start_ns,
            end_ns,
            status_code,
            status_message,
            resource_id,
            scope,
            attributes,
            events,
            link_count,
        ) = row
        assert isinstance(trace_id, bytes) and isinstance(span_id, bytes)
        trace = int.from_bytes(trace_id, "big")
        return ReadableSpan(
            name=str(name),
            context=SpanContext(trace, int.from_bytes(span_id, "big"), False, _SAMPLED),
            parent=(
                SpanContext(trace, int.from_bytes(parent, "big"), False, _SAMPLED)
                if isinstance(parent, bytes) and parent
                else None
            ),
            resource=self._resource(resource_id),
            attributes=_attributes(_text(attributes)),
            events=_events(_text(events)),
            links=self._links(trace_id, span_id) if link_count else (),
            kind=_kind(int(kind) if isinstance(kind, int) else 1),
            status=Status(StatusCode(status_code), _text(status_message) or None)
            if status_code in (0, 1, 2)
            else Status(StatusCode.UNSET),
            start_time=start_ns if isinstance(start_ns, int) else None,
            end_time=end_ns if isinstance(end_ns, int) else None,
            instrumentation_scope=InstrumentationScope(_text(scope) or ""),
        )

    def _resource(self, resource_id: object) -> Resource:
        if not isinstance(resource_id, int):
            return Resource({})
        found = self._resources.get(resource_id)
        if found is None:
            row = self._conn.execute(
                "SELECT attributes FROM resources WHERE id = ?", (resource_id,)
            ).fetchone()
            found = Resource(_attributes(row[0]) if row else {})
            self._resources[resource_id] = found
        return found

    def _links(self, trace_id: bytes, span_id: bytes) -> list[Link]:
        rows = self._conn.execute(
            "SELECT linked_trace_id, linked_span_id, attributes FROM links "
            "WHERE trace_id = ? AND span_id = ? ORDER BY idx",
            (trace_id, span_id),
        )
        return [
            Link(
                SpanContext(
                    int.from_bytes(linked_trace, "big"), int.from_bytes(linked_span, "big"), True
                ),
                _attributes(attributes) if attributes else None,
            )
            for linked_trace, linked_span, attributes in rows
        ]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _kind(otlp_kind: int) -> SpanKind:
    """OTLP numbers kinds from 1 (INTERNAL); the SDK's enum from 0."""
    try:
        return SpanKind(otlp_kind - 1)
    except ValueError:
        return SpanKind.INTERNAL


def _attributes(text: str | None) -> dict[str, AttributeValue]:
    """The stored JSON object as span attributes: lists as tuples (what the SDK keeps), a
    value of another shape (a key-value list from another SDK) as its JSON text."""
    if not text:
        return {}
    loaded = orjson.loads(text)
    out: dict[str, AttributeValue] = {}
    if not isinstance(loaded, dict):
        return out
    for key, value in loaded.items():
        if isinstance(value, str | bool | int | float):
            out[key] = value
        elif isinstance(value, list) and all(
            isinstance(v, str | bool | int | float) for v in value
        ):
            out[key] = tuple(value)
        elif value is not None:
            out[key] = orjson.dumps(value).decode()
    return out


def _events(text: str | None) -> list[Event]:
    if not text:
        return []
    loaded = orjson.loads(text)
    events = []
    for event in loaded if isinstance(loaded, list) else []:
        if isinstance(event, dict):
            events.append(
                Event(
                    str(event.get("name", "")),
                    _attributes(orjson.dumps(event.get("attributes") or {}).decode()),
                    int(event.get("time_ns") or 0),
                )
            )
    return events
