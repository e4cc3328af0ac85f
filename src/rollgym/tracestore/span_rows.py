"""Decoded OTLP spans -> the store's rows: the one place that knows the row layout.

Why a module of its own: both readers end here. :func:`to_rows` walks a request parsed by
``opentelemetry-proto`` (the JSON encoding, and the reference for everything unusual), and
:mod:`rollgym.tracestore.wire_rows` reads protobuf bytes directly; each hands every span to
:func:`add_span`, so the two cannot disagree on a column. Like ``wire_rows``, this module is
compiled with mypyc where the machine can (``setup.py``; :mod:`rollgym.tracestore.native`):
building a span's row tuples was the largest cost left in the decoder once the walk was
compiled. Hence the ``Final`` names: compiled, they are constants, not module lookups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollgym.telemetry import names
from rollgym.tracestore.decode import (
    PayloadError,
    ResourceIds,
    SpanBatch,
    any_value,
    attributes,
    json_text,
)

_ROLLOUT_ID: Final = names.ROLLOUT_ID
_SPAN_DISPATCH: Final = names.SPAN_DISPATCH
_ROLLOUT_REWARD: Final = names.ROLLOUT_REWARD
_ROLLOUT_ATTEMPT: Final = names.ROLLOUT_ATTEMPT
_DISPATCH_NAME: Final = names.DISPATCH_NAME
_ROLLOUT_OUTCOME: Final = names.ROLLOUT_OUTCOME
_SCALARS: Final = frozenset({"string_value", "int_value", "double_value", "bool_value"})


def to_rows(request: ExportTraceServiceRequest, resource_id: ResourceIds) -> SpanBatch:
    """Flatten a request into span, link and dispatch rows.

    ``resource_id`` maps a Resource to a stable row id so identical resources are stored once;
    every batch carries the rows of the resources it references (inserted OR IGNORE), so a
    batch is self-contained whatever happened to earlier ones. Dispatch spans also get a row in
    ``dispatches`` so ``ls`` never scans spans. This reads message objects (the JSON encoding,
    and the reference for :mod:`rollgym.tracestore.wire_rows`, which reads protobuf bytes
    directly into the same :func:`add_span`).
    """
    batch = SpanBatch()
    for resource_spans in request.resource_spans:
        res_id, run_id, resource_row = resource_id(resource_spans.resource)
        batch.resources.append(resource_row)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name or None
            for span in scope_spans.spans:
                attrs = {}
                for kv in span.attributes:  # hot loop: scalars without a call
                    value = kv.value
                    kind = value.WhichOneof("value")
                    attrs[kv.key] = getattr(value, kind) if kind in _SCALARS else any_value(value)
                events = [
                    {
                        "name": event.name,
                        "time_ns": event.time_unix_nano,
                        "attributes": attributes(event.attributes),
                    }
                    for event in span.events
                ]
                links = [
                    (link.trace_id, link.span_id, attributes(link.attributes) or None)
                    for link in span.links
                ]
                add_span(
                    batch,
                    (span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind),
                    (span.start_time_unix_nano, span.end_time_unix_nano),
                    (span.status.code, span.status.message),
                    (res_id, scope, run_id),
                    attrs,
                    events,
                    links,
                )
    return batch


#: A link as read from a request: (trace id, span id, attributes or None).
LinkParts = tuple[bytes, bytes, dict[str, Any] | None]


def add_span(
    batch: SpanBatch,
    identity: tuple[bytes, bytes, bytes, str, int],
    times: tuple[int, int],
    status: tuple[int, str],
    origin: tuple[int, str | None, str | None],
    attrs: Mapping[str, object],
    events: Sequence[Mapping[str, object]],
    links: list[LinkParts],
) -> None:
    """Append one span's rows: ``identity`` = (trace id, span id, parent id or b"", name,
    kind), ``origin`` = (resource row id, scope name or None, run id)."""
    trace_id, span_id, parent, name, kind = identity
    if len(trace_id) != 16 or len(span_id) != 8:
        raise PayloadError("span with invalid trace_id or span_id length")
    start_ns, end_ns = times
    res_id, scope, run_id = origin
    rollout_id = attrs.get(_ROLLOUT_ID)
    if rollout_id is not None and not isinstance(rollout_id, str):
        rollout_id = str(rollout_id)
    for index, (linked_trace, linked_span, link_attrs) in enumerate(links):
        batch.links.append(
            (
                trace_id,
                span_id,
                index,
                linked_trace,
                linked_span,
                json_text(link_attrs) if link_attrs else None,
            )
        )
    batch.spans.append(
        (
            trace_id,
            span_id,
            parent or None,
            name,
            kind,
            start_ns,
            end_ns,
            status[0],
            status[1] or None,
            res_id,
            scope,
            rollout_id,
            run_id,
            json_text(attrs),
            json_text(events) if events else None,
            len(links),
        )
    )
    if name == _SPAN_DISPATCH:
        reward = attrs.get(_ROLLOUT_REWARD)
        attempt = attrs.get(_ROLLOUT_ATTEMPT)
        batch.dispatches.append(
            (
                trace_id,
                span_id,
                0 if parent else 1,
                rollout_id,
                attempt if isinstance(attempt, int) else None,
                attrs.get(_DISPATCH_NAME),
                attrs.get(_ROLLOUT_OUTCOME),
                float(reward) if isinstance(reward, int | float) else None,
                start_ns,
                max(0, end_ns - start_ns),
                run_id,
                len(links),
            )
        )
