"""OTLP/HTTP trace payloads -> rows for the store.

Why a module of its own: the receiver must reject a bad payload *before* anything touches the
database (a batch is all or nothing), and the store must stay ignorant of wire formats. The
decoder is the one place that knows OTLP's protobuf and JSON encodings, gzip, and the OTLP JSON
quirk that trace and span ids are hex strings (protobuf's JSON mapping expects base64).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

JSON_TYPE = "application/json"
PROTOBUF_TYPE = "application/x-protobuf"
#: Media types read as OTLP protobuf (an absent Content-Type too).
PROTOBUF_MEDIA_TYPES = frozenset({PROTOBUF_TYPE, "application/protobuf", ""})


class PayloadError(ValueError):
    """A payload the receiver refuses: answered with HTTP 400 (or 413 when ``too_large``)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large

    def __reduce__(self) -> tuple[object, ...]:
        # Raised in a decode worker process and re-raised in the receiver: keep ``too_large``.
        return (_payload_error, (str(self), self.too_large))


def _payload_error(message: str, too_large: bool) -> PayloadError:
    return PayloadError(message, too_large=too_large)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding: gzip`` without ever inflating more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise PayloadError(f"unsupported Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise PayloadError(f"bad gzip body: {exc}") from exc
    if len(data) > limit:
        raise PayloadError(f"decompressed body exceeds {limit} bytes", too_large=True)
    if not inflater.eof:
        raise PayloadError("truncated gzip body")
    return data


def media_type(content_type: str) -> str:
    """``Content-Type`` without parameters, lowercase."""
    return content_type.split(";", 1)[0].strip().lower()


def parse_traces(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """Parse an ExportTraceServiceRequest in either OTLP/HTTP encoding."""
    request = ExportTraceServiceRequest()
    mime = media_type(content_type)
    if mime == JSON_TYPE:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise PayloadError(f"invalid JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise PayloadError("OTLP JSON body must be an object")
        _hex_ids_to_base64(document)
        try:
            json_format.ParseDict(document, request, ignore_unknown_fields=True)
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise PayloadError(f"invalid OTLP JSON: {exc}") from exc
        return request
    if mime in PROTOBUF_MEDIA_TYPES:
        try:
            request.ParseFromString(body)
        except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
            raise PayloadError(f"invalid OTLP protobuf: {exc}") from exc
        return request
    raise PayloadError(f"unsupported Content-Type {content_type!r}")


def _hex_ids_to_base64(document: Mapping[str, object]) -> None:
    """OTLP JSON writes ids as hex; protobuf's JSON mapping reads bytes as base64."""
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                _convert_ids(span, ("traceId", "trace_id", "spanId", "span_id"))
                _convert_ids(span, ("parentSpanId", "parent_span_id"))
                for link in _list(span, "links"):
                    _convert_ids(link, ("traceId", "trace_id", "spanId", "span_id"))


def _list(parent: object, *keys: str) -> list[object]:
    if not isinstance(parent, dict):
        return []
    for key in keys:
        value = parent.get(key)
        if isinstance(value, list):
            return value
    return []


def _convert_ids(holder: object, keys: tuple[str, ...]) -> None:
    if not isinstance(holder, dict):
        return
    for key in keys:
        value = holder.get(key)
        if isinstance(value, str) and value:
            try:
                raw = bytes.fromhex(value)
            except ValueError as exc:
                raise PayloadError(f"{key} is not hex: {value!r}") from exc
            holder[key] = base64.b64encode(raw).decode("ascii")


# --- values and the rows container (span_rows.py builds the rows) --------------------------


def any_value(value: AnyValue) -> object:
    """An OTLP AnyValue as a plain JSON-able Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, kind)


def attributes(kvs: Any) -> dict[str, object]:
    """Repeated KeyValue -> dict (later keys win, as in the SDK)."""
    return {kv.key: any_value(kv.value) for kv in kvs}


def json_text(value: object) -> str:
    """Compact JSON text; SQLite's json functions read TEXT (a BLOB would be taken as JSONB)."""
    return orjson.dumps(value).decode()


@dataclass
class SpanBatch:
    """Rows of one request, in the column order of the store's insert statements."""

    spans: list[tuple[object, ...]] = field(default_factory=list)
    resources: list[tuple[object, ...]] = field(default_factory=list)
    links: list[tuple[object, ...]] = field(default_factory=list)
    dispatches: list[tuple[object, ...]] = field(default_factory=list)


#: Maps a Resource to (row id, run id, resource row); see store.ResourceRegistry.
ResourceIds = Callable[[Resource], tuple[int, str | None, tuple[object, ...]]]


def hex_id(raw: bytes | None) -> str | None:
    """Store ids are BLOBs; everything shown to people or scripts is lowercase hex."""
    return raw.hex() if raw else None


def id_bytes(text: str) -> bytes:
    """Parse a hex id given by a user; a clear error instead of a silent miss."""
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise ValueError(f"not a hex id: {text!r}") from exc


__all__ = [
    "PayloadError",
    "SpanBatch",
    "any_value",
    "attributes",
    "decompress",
    "hex_id",
    "id_bytes",
    "json_text",
    "media_type",
    "parse_traces",
]
