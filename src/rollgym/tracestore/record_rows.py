"""Span records from rollgym's own processes -> store rows, with no OTLP in between.

Why: a run's own processes (the driver, the servers it launches) export to the run's own trace
store. On that path, OTLP meant an encode in the exporter child (about 3-4 µs a span,
compiled) and a parse plus a wire walk in a store decoder (about 3-6 µs a span, compiled)
only to arrive at the rows the records already hold. The child now posts the records it got
from the shipper as they are (:data:`~rollgym.telemetry.pipeline.frames.RECORDS_TYPE`: a
batch of records marshalled as one), and the store's writer reads them here, straight into
:func:`~rollgym.tracestore.span_rows.add_span`: the same function the OTLP readers end in, so
the two paths cannot disagree on a column.

What OTLP would have done to a record is done here too, so a span is stored the same way
whichever path it took (``tests/unit/tracestore/test_record_rows.py`` compares the two):
an attribute value OTLP cannot carry (an int beyond 64 bits, a mapping, bytes, a sequence
holding one) is left out, sequences become lists, a kind is OTLP's (the API's plus one),
spans are grouped by scope in first-seen order. A text that is not valid Unicode (a lone
surrogate, which user code can put in a span) has each such character replaced by U+FFFD, as
the OTLP encoder does (:func:`~rollgym.telemetry.pipeline.records.valid_record`): one bad text
never costs the other spans of its batch.

The body is ``marshal`` data from the run's own exporter child, the same interpreter build.
Anything that is not a well-formed body of records is refused as a bad payload (HTTP 400):
nothing reaches the database. Foreign senders (engines, other SDKs) keep speaking OTLP.
"""

from __future__ import annotations

import marshal
from typing import Any, Final

from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from rollgym.telemetry.pipeline import wire
from rollgym.telemetry.pipeline.frames import RECORDS_FORMAT, RECORDS_TYPE
from rollgym.telemetry.pipeline.records import SCOPE, has_invalid_text, valid_record
from rollgym.tracestore.decode import PayloadError, ResourceIds, SpanBatch
from rollgym.tracestore.span_rows import LinkParts, add_span

__all__ = ["RECORDS_TYPE", "rows_from_records"]

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
#: Resources already read, by their marshal bytes (a process exports with one resource).
_resources: dict[bytes, tuple[int, str | None, tuple[object, ...]]] = {}
_RESOURCES_MAX: Final = 1024


def rows_from_records(body: bytes, resource_id: ResourceIds) -> SpanBatch:
    """The rows of one records body; raises PayloadError (nothing stored) for a bad one."""
    try:
        version, resource, packed = marshal.loads(body)
    except (EOFError, ValueError, TypeError) as exc:
        raise PayloadError(f"invalid span records body: {exc}") from None
    if version != RECORDS_FORMAT:
        raise PayloadError(f"span records of format {version!r}; this store reads {RECORDS_FORMAT}")
    try:
        records = marshal.loads(packed)
        if type(records) is not list:
            raise PayloadError("invalid span records body: the records are not a list")
        try:
            return _rows(resource, records, resource_id)
        except Exception:
            if not has_invalid_text(records):
                raise
        # A lone surrogate somewhere (user code put it in a span): the batch again, each such
        # text made valid, rather than refusing every other rollout's span beside it.
        return _rows(resource, valid_record(records), resource_id)
    except PayloadError:
        raise
    except Exception as exc:  # a record of the wrong shape or types
        raise PayloadError(f"invalid span record: {type(exc).__name__}: {exc}") from None


def _rows(resource: bytes, records: list[tuple[Any, ...]], resource_id: ResourceIds) -> SpanBatch:
    batch = SpanBatch()
    res_id, run_id, resource_row = _resource(resource, resource_id)
    batch.resources.append(resource_row)
    scopes = {record[SCOPE] for record in records}
    for scope_name, _version, _schema in scopes:
        if scope_name:
            scope_name.encode()  # not valid text: SQLite could not store it (see the caller)
    if len(scopes) > 1:  # OTLP groups a request's spans by scope, first seen first
        by_scope: dict[tuple[str, str | None, str | None], list[tuple[Any, ...]]] = {}
        for record in records:
            by_scope.setdefault(record[SCOPE], []).append(record)
        records = [record for group in by_scope.values() for record in group]
    to_bytes = int.to_bytes
    for (
        trace_id,
        span_id,
        parent_id,
        _parent_remote,
        name,
        kind,
        start,
        end,
        attrs,
        events,
        links,
        status_code,
        status_message,
        scope,
        _trace_state,
    ) in records:  # the hot loop: one span a turn, no call but add_span's when it can
        name.encode()  # not valid text: SQLite could not store it (see the caller)
        if status_message:  # only an error's
            status_message.encode()
        add_span(
            batch,
            (
                to_bytes(trace_id, 16, "big"),
                to_bytes(span_id, 8, "big"),
                to_bytes(parent_id, 8, "big") if parent_id else b"",
                name,
                kind + 1,  # the API's SpanKind starts at INTERNAL = 0, OTLP's at 1
            ),
            (start, end),
            (status_code, status_message or ""),
            (res_id, scope[0] or None, run_id),
            _carried(attrs),
            _events(events) if events else [],
            _links(links) if links else [],
        )
    return batch


def _events(events: list[tuple[str, int, dict[str, Any] | None]]) -> list[dict[str, object]]:
    return [
        {"name": name, "time_ns": when, "attributes": _carried(attrs)}
        for name, when, attrs in events
    ]


def _links(links: list[tuple[int, int, bool, dict[str, Any] | None]]) -> list[LinkParts]:
    return [
        (trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"), _carried(attrs) or None)
        for trace_id, span_id, _remote, attrs in links
    ]


def _resource(raw: bytes, resource_id: ResourceIds) -> tuple[int, str | None, tuple[object, ...]]:
    """The resource's (row id, run id, row), as the OTLP path gets them: from the ``Resource``
    message the exporter would have encoded (so the fingerprint, hence the id, is the same)."""
    known = _resources.get(raw)
    if known is None:
        attrs = marshal.loads(raw)
        message = Resource.FromString(b"".join(wire.attributes(b"\x0a", attrs)))
        if len(_resources) >= _RESOURCES_MAX:
            _resources.clear()
        known = _resources[raw] = resource_id(message)
    return known


def _carried(attrs: dict[str, Any] | None) -> dict[str, Any]:
    """``attrs`` as OTLP carries them. The usual case (every value a str, bool, float or a
    64-bit int) is one pass and no copy."""
    if not attrs:
        return {}
    for value in attrs.values():
        kind = type(value)
        if kind is str or kind is float or kind is bool:
            continue
        if kind is int and _INT64_MIN <= value <= _INT64_MAX:
            continue
        return _copy_carried(attrs)
    return attrs


def _copy_carried(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        try:
            key.encode()  # a key that is not valid text: OTLP leaves the attribute out
            out[key] = _value(value)
        except (TypeError, ValueError):
            continue
    return out


def _value(value: Any) -> Any:
    """``value`` as OTLP carries it (sequences as lists), or TypeError/ValueError when it
    cannot carry it."""
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError("int beyond 64 bits")
        return value
    if isinstance(value, tuple | list):
        return [_value(item) for item in value]
    raise TypeError(f"unsupported attribute value {type(value).__name__}")
