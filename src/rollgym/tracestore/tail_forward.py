"""A tail-sampled run's kept traces, sent on from its store to the OTLP backend chosen.

With ``telemetry.tail_sampling`` and an OTLP endpoint, every process of the run exports to the
run's local store instead (the one place all of a rollout's spans meet, where they wait for the
driver's decision, ``docs/design/tail-sampling.md``). Once the dropped traces are removed, what
is left of the session's spans (the kept rollout traces, the startup and job traces) is read
back and exported to the endpoint with the OpenTelemetry SDK's own exporter for its protocol,
in batches, each span as it was stored: its ids, parent, kind, times, status, attributes,
events, links, resource and scope.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from rollgym.tracestore.store import connect_readonly

#: Spans per export request (the SDK's batch processor's default).
BATCH = 512
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class Exporter(Protocol):
    """The part of an SDK ``SpanExporter`` forwarding uses."""

    def export(self, spans: Sequence[ReadableSpan], /) -> SpanExportResult: ...


@dataclass
class Forwarded:
    """What forwarding did: spans the backend accepted, and those it did not."""

    spans_sent: int = 0
    spans_failed: int = 0


def forward_spans(db_path: str | Path, exporter: Exporter, since_ns: int) -> Forwarded:
    """Export every span in the store that started at or after ``since_ns`` (this session's)."""
    result = Forwarded()
    conn = connect_readonly(db_path)
    try:
        resources = {
            row_id: Resource(_attributes(text))
            for row_id, text in conn.execute("SELECT id, attributes FROM resources")
        }
        batch: list[ReadableSpan] = []
        for span in _spans(conn, resources, since_ns):
            batch.append(span)
            if len(batch) == BATCH:
                _send(exporter, batch, result)
                batch = []
        if batch:
            _send(exporter, batch, result)
    finally:
        conn.close()
    return result


def _send(exporter: Exporter, batch: list[ReadableSpan], result: Forwarded) -> None:
    """One request; after a refused one the rest is counted failed without being sent (the
    SDK's exporter already retried it with backoff: a dead backend costs one request's
    retries, not every batch's)."""
    if result.spans_failed:
        result.spans_failed += len(batch)
        return
    try:
        ok = exporter.export(batch) is SpanExportResult.SUCCESS
    except Exception:  # noqa: BLE001 - a backend's failure is counted, never raised
        ok = False
    if ok:
        result.spans_sent += len(batch)
    else:
        result.spans_failed += len(batch)


def _spans(
    conn: sqlite3.Connection, resources: dict[int, Resource], since_ns: int
) -> Iterator[ReadableSpan]:
    links = _links(conn, since_ns)
    rows = conn.execute(
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code, "
        "status_message, resource_id, scope, attributes, events FROM spans "
        "WHERE start_ns >= ? ORDER BY trace_id",
        (since_ns,),
    )
    for (
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
    ) in rows:
        trace = int.from_bytes(trace_id, "big")
        yield ReadableSpan(
            name=name,
            context=SpanContext(trace, int.from_bytes(span_id, "big"), False, _SAMPLED),
            parent=(
                SpanContext(trace, int.from_bytes(parent, "big"), False, _SAMPLED)
                if parent
                else None
            ),
            resource=resources.get(resource_id, Resource({})),
            attributes=_attributes(attributes),
            events=_events(events),
            links=links.get((trace_id, span_id), ()),
            kind=_kind(kind),
            status=Status(StatusCode(status_code), status_message or None)
            if status_code in (0, 1, 2)
            else Status(StatusCode.UNSET),
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=InstrumentationScope(scope or ""),
        )


def _links(conn: sqlite3.Connection, since_ns: int) -> dict[tuple[bytes, bytes], list[Link]]:
    out: dict[tuple[bytes, bytes], list[Link]] = {}
    rows = conn.execute(
        "SELECT l.trace_id, l.span_id, l.linked_trace_id, l.linked_span_id, l.attributes "
        "FROM links l JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id "
        "WHERE s.start_ns >= ? ORDER BY l.trace_id, l.span_id, l.idx",
        (since_ns,),
    )
    for trace_id, span_id, linked_trace, linked_span, attributes in rows:
        target = SpanContext(
            int.from_bytes(linked_trace, "big"), int.from_bytes(linked_span, "big"), True
        )
        out.setdefault((trace_id, span_id), []).append(
            Link(target, _attributes(attributes) if attributes else None)
        )
    return out


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
