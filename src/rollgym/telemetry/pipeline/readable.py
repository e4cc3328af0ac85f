"""A span record as the SDK's ``ReadableSpan``: what the SDK's own exporters take.

rollgym records every span of its own processes as a
:data:`~rollgym.telemetry.pipeline.records.SpanRecord`; the OTLP/HTTP exporter child encodes
those itself (:mod:`.wire`). Every other destination (OTLP/gRPC, the console, an exporter
object a test or a bench passes in, OTLP/HTTP when the child cannot start) is one of the SDK's
``SpanExporter`` s, which take ``ReadableSpan`` s: :func:`readable_span` builds one from a
record with the SDK's own attribute rules (``BoundedAttributes``: sequences become tuples),
so those exporters see what an SDK span of the same calls would have given them. A
differential test holds the two to each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from rollgym.telemetry.pipeline.records import (
    ATTRIBUTES,
    END,
    EVENTS,
    KIND,
    LINKS,
    NAME,
    PARENT_IS_REMOTE,
    PARENT_SPAN_ID,
    SCOPE,
    SPAN_ID,
    START,
    STATUS_CODE,
    STATUS_MESSAGE,
    TRACE_ID,
    TRACE_STATE,
    SpanRecord,
    valid_record,
)

__all__ = ["export_spans", "readable_span"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NO_STATE = TraceState()
_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}


def _attributes(values: Mapping[str, Any] | None) -> BoundedAttributes:
    return BoundedAttributes(attributes=values or None, immutable=True)


def readable_span(record: SpanRecord, resource: Resource) -> ReadableSpan:
    """The ``ReadableSpan`` the SDK would have ended for the calls that made ``record``.

    A record keeps no trace flags beside its own (sampled: only sampled spans are recorded),
    so its parent's and its links' contexts are given the sampled flag.
    """
    trace_id = record[TRACE_ID]
    parent_id = record[PARENT_SPAN_ID]
    trace_state = record[TRACE_STATE]
    state = TraceState(list(trace_state)) if trace_state else _NO_STATE
    code = _CODES[record[STATUS_CODE]]
    return ReadableSpan(
        name=record[NAME],
        context=SpanContext(trace_id, record[SPAN_ID], False, _SAMPLED, state),
        parent=SpanContext(trace_id, parent_id, record[PARENT_IS_REMOTE], _SAMPLED, state)
        if parent_id
        else None,
        resource=resource,
        attributes=_attributes(record[ATTRIBUTES]),
        events=[
            Event(event_name, event_attributes or None, when)
            for event_name, when, event_attributes in record[EVENTS] or ()
        ],
        links=[
            Link(SpanContext(l_trace, l_span, l_remote, _SAMPLED), _attributes(l_attributes))
            for l_trace, l_span, l_remote, l_attributes in record[LINKS] or ()
        ],
        kind=_KINDS[record[KIND]],
        status=Status(code, record[STATUS_MESSAGE] if code is StatusCode.ERROR else None),
        start_time=record[START],
        end_time=record[END],
        instrumentation_scope=InstrumentationScope(*record[SCOPE]),
    )


def export_spans(
    exporter: SpanExporter,
    spans: Sequence[ReadableSpan],
    records: Sequence[SpanRecord],
    resource: Resource,
) -> SpanExportResult:
    """``exporter.export(spans)`` (``spans`` made from ``records``). An OTLP exporter cannot
    encode a text that is not valid Unicode (a lone surrogate, which user code can put in a
    span): the batch goes again with each such character replaced by U+FFFD, as the
    exporter child does, so one bad text never costs the other spans beside it."""
    try:
        return exporter.export(spans)
    except UnicodeEncodeError:
        return exporter.export([readable_span(valid_record(r), resource) for r in records])
