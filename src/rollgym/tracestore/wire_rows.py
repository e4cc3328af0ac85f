"""OTLP/HTTP protobuf trace requests -> store rows, read straight from the wire bytes.

Why not the generated messages: reading a parsed request through ``opentelemetry-proto``
(upb) makes a Python wrapper object for every span, attribute and value it touches; those
wrappers were most of the store's decode cost (about 1 µs per attribute, measured: more than
the parse itself). This reader walks the protobuf wire format of an
``ExportTraceServiceRequest`` once (tag = field number << 3 | wire type, length-delimited
submessages, fixed64 times; field numbers from ``opentelemetry/proto``'s ``trace.proto``,
``common.proto`` and ``resource.proto``) and turns each attribute's encoded bytes into its
(key, value) through a bounded cache, since most attributes repeat from span to span (server
names, methods, models, status codes). The rows it produces go through the same
:func:`rollgym.tracestore.span_rows.add_span` as the message path.

Anything it does not expect (a group, a known field with another wire type, a repeated
singular submessage that protobuf would merge, bytes that end early,
text that is not UTF-8) makes it hand the whole request to the message path
(:func:`rollgym.tracestore.span_rows.to_rows` over ``opentelemetry-proto``), which stays the
reference: it decodes what is valid and refuses what is not with the same error as before.
``tests/unit/tracestore/test_wire_rows.py`` checks both give the same rows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from rollgym.tracestore.decode import PayloadError, ResourceIds, SpanBatch, any_value, parse_traces
from rollgym.tracestore.span_rows import LinkParts, add_span, to_rows

_U64: Final = struct.Struct("<Q").unpack_from
_F64: Final = struct.Struct("<d").unpack_from
_UINT64: Final = (1 << 64) - 1
_INT64_SIGN: Final = 1 << 63
_WIRE_VARINT: Final = 0
_WIRE_FIXED64: Final = 1
_WIRE_LEN: Final = 2
_WIRE_FIXED32: Final = 5
#: Cached attribute decodings per process; cleared past this many entries (bounded memory).
_CACHE_MAX: Final = 50_000
_attributes: Final[dict[bytes, tuple[str, Any]]] = {}


class _Irregular(Exception):
    """Input this reader leaves to the message path."""


def rows_from_protobuf(body: bytes, resource_id: ResourceIds) -> SpanBatch:
    """The rows of one protobuf ``ExportTraceServiceRequest``; raises PayloadError.

    The body is parsed by ``opentelemetry-proto`` first (upb, in C: about 0.6 µs a span, a
    twentieth of the walk) without reading the message: that parse alone decides which bodies
    are refused as corrupt or not UTF-8, exactly as the reference does, including in fields
    this walk skips (a scope's version, a schema URL, a trace state) and wherever a body has
    two faults, so the walk only ever reads bodies protobuf accepted."""
    parsed = parse_traces(body, "application/x-protobuf")
    try:
        return _request(body, resource_id)
    except PayloadError:
        raise
    except Exception:  # _Irregular, or bytes that end early: the reference path decides
        return to_rows(parsed, resource_id)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _UINT64, i
        shift += 7
        if shift >= 70:
            raise _Irregular


def _one_field(data: bytes, i: int) -> tuple[int, int, int, int]:
    """The field at ``i``: (field number, wire type, a, b) with ``b`` where the next field
    starts; ``a`` is a varint's value, or where the field's bytes start (``data[a:b]``)."""
    tag = data[i]
    if tag < 0x80:
        i += 1
    else:
        tag, i = _varint(data, i)
    if tag < 8:
        raise _Irregular  # field number 0 is invalid
    wire = tag & 7
    if wire == _WIRE_VARINT:
        value, after = _varint(data, i)
        return tag >> 3, wire, value, after
    if wire == _WIRE_LEN:
        size = data[i]
        if size < 0x80:
            i += 1
        else:
            size, i = _varint(data, i)
        return tag >> 3, wire, i, i + size
    if wire == _WIRE_FIXED64:
        return tag >> 3, wire, i, i + 8
    if wire == _WIRE_FIXED32:
        return tag >> 3, wire, i, i + 4
    raise _Irregular  # groups (deprecated) or garbage


def _fields(data: bytes, i: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Every field of the message in ``data[i:end]``, as :func:`_one_field` reads them."""
    while i < end:
        field = _one_field(data, i)
        i = field[3]
        if i > end:
            raise _Irregular
        yield field


def _request(body: bytes, resource_id: ResourceIds) -> SpanBatch:
    batch = SpanBatch()
    for field, wire, a, b in _fields(body, 0, len(body)):
        if field != 1:
            continue  # unknown field: ignored, as protobuf does
        if wire != _WIRE_LEN:
            raise _Irregular
        _resource_spans(body, a, b, resource_id, batch)
    return batch


def _resource_spans(data: bytes, i: int, end: int, ids: ResourceIds, batch: SpanBatch) -> None:
    resource: bytes | None = None
    scopes: list[tuple[int, int]] = []
    for field, wire, a, b in _fields(data, i, end):
        if field in (1, 2) and wire != _WIRE_LEN:
            raise _Irregular
        if field == 1:
            if resource is not None:
                raise _Irregular  # protobuf would merge the two
            resource = data[a:b]
        elif field == 2:
            scopes.append((a, b))
    res_id, run_id, resource_row = ids(Resource.FromString(resource or b""))
    batch.resources.append(resource_row)
    for a, b in scopes:
        _scope_spans(data, a, b, (res_id, run_id), batch)


def _scope_spans(
    data: bytes, i: int, end: int, resource: tuple[int, str | None], batch: SpanBatch
) -> None:
    scope: str | None = None
    spans: list[tuple[int, int]] = []
    seen_scope = False
    for field, wire, a, b in _fields(data, i, end):
        if field in (1, 2) and wire != _WIRE_LEN:
            raise _Irregular
        if field == 1:
            if seen_scope:
                raise _Irregular
            seen_scope = True
            scope = _scope_name(data, a, b)
        elif field == 2:
            spans.append((a, b))
    res_id, run_id = resource
    origin = (res_id, scope or None, run_id)
    for a, b in spans:
        _span(data, a, b, origin, batch)


def _scope_name(data: bytes, i: int, end: int) -> str:
    name = ""
    for field, wire, a, b in _fields(data, i, end):
        if field == 1:
            if wire != _WIRE_LEN:
                raise _Irregular
            name = data[a:b].decode()
    return name


def _span(
    data: bytes, i: int, end: int, origin: tuple[int, str | None, str | None], batch: SpanBatch
) -> None:
    """One Span. The hot loop: the usual one-byte tags are read inline (measured: a generator
    step per field cost as much as the rest of the span); anything else goes through
    :func:`_fields`."""
    trace_id = span_id = parent = b""
    name = ""
    kind = start_ns = end_ns = 0
    status = (0, "")
    seen_status = False
    attrs: dict[str, object] = {}
    events: list[dict[str, object]] = []
    links: list[LinkParts] = []
    cached = _attributes.get
    while i < end:
        tag = data[i]
        if tag == _START_TAG or tag == _END_TAG:  # noqa: SIM109 (start / end time)
            if tag == _START_TAG:
                start_ns = _U64(data, i + 1)[0]
            else:
                end_ns = _U64(data, i + 1)[0]
            i += 9
            continue
        # Compiled, comparisons beat a set lookup; interpreted, they cost the same, since the
        # usual tag (an attribute) is the first one tried.
        if not (  # kind, flags, or a field the store does not keep
            tag == _ATTRIBUTE_TAG  # noqa: SIM109
            or tag == _TRACE_ID_TAG
            or tag == _SPAN_ID_TAG
            or tag == _PARENT_TAG
            or tag == _NAME_TAG
            or tag == _STATUS_TAG
            or tag == _EVENT_TAG
            or tag == _LINK_TAG
        ):
            if tag == _KIND_TAG and data[i + 1] < 0x80:  # a one-byte kind
                kind = data[i + 1]
                i += 2
                continue
            if tag == _FLAGS_TAG_0 and data[i + 1] == _FLAGS_TAG_1:  # flags: not kept
                i += 6
                continue
            field, wire, number, i = _one_field(data, i)
            if field in _SPAN_FIELDS:
                if field != 6 or wire != _WIRE_VARINT:
                    raise _Irregular  # a known field with an unexpected wire type
                kind = _enum(wire, number)
            continue
        size = data[i + 1]
        if size < 0x80:
            i += 2
        else:
            size, i = _varint(data, i + 1)
        stop = i + size
        if tag == _ATTRIBUTE_TAG:
            raw = data[i:stop]
            key, value = cached(raw) or _key_value(raw)
            attrs[key] = value  # later keys win, as in the message path
        elif tag == _TRACE_ID_TAG:
            trace_id = data[i:stop]
        elif tag == _SPAN_ID_TAG:
            span_id = data[i:stop]
        elif tag == _PARENT_TAG:
            parent = data[i:stop]
        elif tag == _NAME_TAG:
            name = data[i:stop].decode()
        elif tag == _STATUS_TAG:
            if seen_status:
                raise _Irregular  # protobuf would merge the two
            seen_status = True
            status = _status(data, i, stop)
        elif tag == _EVENT_TAG:
            events.append(_event(data, i, stop))
        else:
            links.append(_link(data, i, stop))
        i = stop
    if i != end:
        raise _Irregular
    identity = (trace_id, span_id, parent, name, kind)
    add_span(batch, identity, (start_ns, end_ns), status, origin, attrs, events, links)


# Tags (field number << 3 | wire type) of the Span fields the hot loop reads. ``Final`` so that
# compiled (see :mod:`rollgym.tracestore.native`) they are constants, not module lookups.
_TRACE_ID_TAG: Final = 1 << 3 | _WIRE_LEN
_SPAN_ID_TAG: Final = 2 << 3 | _WIRE_LEN
_PARENT_TAG: Final = 4 << 3 | _WIRE_LEN
_NAME_TAG: Final = 5 << 3 | _WIRE_LEN
_KIND_TAG: Final = 6 << 3 | _WIRE_VARINT
_START_TAG: Final = 7 << 3 | _WIRE_FIXED64
_END_TAG: Final = 8 << 3 | _WIRE_FIXED64
_ATTRIBUTE_TAG: Final = 9 << 3 | _WIRE_LEN
_EVENT_TAG: Final = 11 << 3 | _WIRE_LEN
_LINK_TAG: Final = 13 << 3 | _WIRE_LEN
_STATUS_TAG: Final = 15 << 3 | _WIRE_LEN
#: Span.flags (field 16, fixed32): a two-byte tag, 0x85 0x01, then 4 bytes.
_FLAGS_TAG_0: Final = 0x80 | ((16 << 3 | _WIRE_FIXED32) & 0x7F)
_FLAGS_TAG_1: Final = (16 << 3 | _WIRE_FIXED32) >> 7
#: Span fields the hot loop reads; met with another wire type they go to the message path.
_SPAN_FIELDS: Final = frozenset({1, 2, 4, 5, 6, 7, 8, 9, 11, 13, 15})


def _enum(wire: int, value: int) -> int:
    if wire != _WIRE_VARINT or value >= 1 << 31:  # negative or oversized: the message path
        raise _Irregular
    return value


def _status(data: bytes, i: int, end: int) -> tuple[int, str]:
    code, message = 0, ""
    for field, wire, a, b in _fields(data, i, end):
        if field == 2:
            if wire != _WIRE_LEN:
                raise _Irregular
            message = data[a:b].decode()
        elif field == 3:
            code = _enum(wire, a)
    return code, message


def _event(data: bytes, i: int, end: int) -> dict[str, object]:
    time_ns, name = 0, ""
    attrs: dict[str, object] = {}
    for field, wire, a, b in _fields(data, i, end):
        if field == 1:
            if wire != _WIRE_FIXED64:
                raise _Irregular
            time_ns = _U64(data, a)[0]
        elif field == 2:
            if wire != _WIRE_LEN:
                raise _Irregular
            name = data[a:b].decode()
        elif field == 3:
            if wire != _WIRE_LEN:
                raise _Irregular
            key, value = _key_value(data[a:b])
            attrs[key] = value
    return {"name": name, "time_ns": time_ns, "attributes": attrs}


def _link(data: bytes, i: int, end: int) -> LinkParts:
    trace_id = span_id = b""
    attrs: dict[str, object] = {}
    for field, wire, a, b in _fields(data, i, end):
        if field in (1, 2, 4) and wire != _WIRE_LEN:
            raise _Irregular
        if field == 1:
            trace_id = data[a:b]
        elif field == 2:
            span_id = data[a:b]
        elif field == 4:
            key, value = _key_value(data[a:b])
            attrs[key] = value
    return trace_id, span_id, attrs or None


def _key_value(raw: bytes) -> tuple[str, Any]:
    """One encoded KeyValue -> (key, value), cached: the same bytes are the same attribute."""
    known = _attributes.get(raw)
    if known is not None:
        return known
    key, value = "", None
    for field, wire, a, b in _fields(raw, 0, len(raw)):
        if field in (1, 2) and wire != _WIRE_LEN:
            raise _Irregular
        if field == 1:
            key = raw[a:b].decode()
        elif field == 2:
            if value is not None:
                raise _Irregular  # protobuf would merge the two values
            value = _value(raw, a, b)
    if len(_attributes) >= _CACHE_MAX:
        _attributes.clear()
    _attributes[raw] = known = (key, value)
    return known


def _value(data: bytes, i: int, end: int) -> object:
    """An AnyValue: a string, bool, int or double read here (the last one set wins, as in a
    oneof); one that holds an array, a map or bytes is read by ``opentelemetry-proto``."""
    value: object = None
    for field, wire, a, b in _fields(data, i, end):
        if field in (5, 6, 7):
            return any_value(AnyValue.FromString(data[i:end]))
        if field == 1 and wire == _WIRE_LEN:
            value = data[a:b].decode()
        elif field == 2 and wire == _WIRE_VARINT:
            value = a != 0
        elif field == 3 and wire == _WIRE_VARINT:
            value = a - (1 << 64) if a & _INT64_SIGN else a
        elif field == 4 and wire == _WIRE_FIXED64:
            value = _F64(data, a)[0]
        elif field <= 7:
            raise _Irregular
    return value
