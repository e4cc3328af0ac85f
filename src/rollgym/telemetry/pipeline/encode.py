"""Span records -> one OTLP ``ExportTraceServiceRequest``, in the exporter child.

Built with ``opentelemetry-proto``'s generated classes (the upb runtime), field for field what
the SDK's OTLP encoder writes for the same span (checked by a round-trip test against it), so a
receiver cannot tell which pipeline produced a span. It runs in the exporter child, never in
the recording process.

A value the wire format cannot carry (an int beyond 64 bits, a mixed sequence) loses that one
attribute, never the span or the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

from rollgym.telemetry.pipeline.records import SpanRecord

_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, tuple | list):
        out = AnyValue()
        out.array_value.values.extend(_any_value(item) for item in value)
        return out
    raise TypeError(f"unsupported attribute value {type(value).__name__}")


def key_values(attributes: Mapping[str, Any] | None) -> list[KeyValue]:
    """Attributes as OTLP KeyValues; an unencodable value drops only its own key."""
    out = []
    if attributes:
        for key, value in attributes.items():
            try:
                out.append(KeyValue(key=key, value=_any_value(value)))
            except (TypeError, ValueError):
                continue
    return out


def _flags(is_remote: bool) -> int:
    return _HAS_IS_REMOTE | _IS_REMOTE if is_remote else _HAS_IS_REMOTE


def _span(record: SpanRecord) -> Span:
    (
        trace_id,
        span_id,
        parent_id,
        parent_remote,
        name,
        kind,
        start,
        end,
        attributes,
        events,
        links,
        status_code,
        status_message,
        _scope,
        trace_state,
    ) = record
    trace_bytes = trace_id.to_bytes(16, "big")
    span = Span(
        trace_id=trace_bytes,
        span_id=span_id.to_bytes(8, "big"),
        trace_state=",".join(f"{k}={v}" for k, v in trace_state) if trace_state else "",
        parent_span_id=parent_id.to_bytes(8, "big") if parent_id else b"",
        name=name,
        kind=kind + 1,  # the API's SpanKind starts at INTERNAL = 0, OTLP's at UNSPECIFIED = 0
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=key_values(attributes),
        status=Status(code=status_code, message=status_message or ""),
        flags=_flags(parent_remote) if parent_id else _HAS_IS_REMOTE,
    )
    if events:
        span.events.extend(
            Span.Event(name=e_name, time_unix_nano=when, attributes=key_values(e_attrs))
            for e_name, when, e_attrs in events
        )
    if links:
        span.links.extend(
            Span.Link(
                trace_id=l_trace.to_bytes(16, "big"),
                span_id=l_span.to_bytes(8, "big"),
                attributes=key_values(l_attrs),
                flags=_flags(l_remote),
            )
            for l_trace, l_span, l_remote, l_attrs in links
        )
    return span


def encode_request(
    resource: Mapping[str, Any], records: Iterable[SpanRecord], resource_schema_url: str = ""
) -> ExportTraceServiceRequest:
    """One request: one resource, one ``ScopeSpans`` per instrumentation scope, in order seen."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(key_values(resource))
    if resource_schema_url:
        resource_spans.schema_url = resource_schema_url
    by_scope: dict[tuple[str, str | None, str | None], Any] = {}
    for record in records:
        scope = record[13]
        scope_spans = by_scope.get(scope)
        if scope_spans is None:
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope[0]
            if scope[1]:
                scope_spans.scope.version = scope[1]
            if scope[2]:
                scope_spans.schema_url = scope[2]
            by_scope[scope] = scope_spans
        scope_spans.spans.append(_span(record))
    return request
