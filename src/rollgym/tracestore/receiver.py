"""The OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/metrics`` on aiohttp.

Why aiohttp: one small dependency with a C HTTP parser, no ASGI layer between the socket and
the handler (measured faster than Starlette/uvicorn for this many small POSTs), and static
files plus JSON routes for the viewer on the same app. Answers follow the OTLP/HTTP spec: 200
with an empty Export*ServiceResponse, 400/413 with a ``google.rpc.Status`` body, in the
encoding of the request.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from rollgym.http import REQUEST_READ_TIMEOUT_S
from rollgym.telemetry.pipeline.frames import METRICS_PATH, TRACES_PATH
from rollgym.tracestore.decode import JSON_TYPE, PROTOBUF_TYPE, PayloadError, decompress
from rollgym.tracestore.store_workers import StoreFull
from rollgym.tracestore.writer import BatchWriter

log = logging.getLogger(__name__)

#: Default limit on a request body, compressed or not (the OTel SDK sends ~512 spans a batch).
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
WRITER_KEY = web.AppKey("writer", BatchWriter)
MAX_BODY_KEY = web.AppKey("max_body", int)
READ_TIMEOUT_KEY = web.AppKey("read_timeout_s", float)
_FULL_SAID_KEY = web.AppKey("disk_full_said", bool)
_INVALID_ARGUMENT = 3
_RESOURCE_EXHAUSTED = 8
_UNAVAILABLE = 14
#: HTTP 507 Insufficient Storage: the disk is full; senders count the batch lost at once.
_DISK_FULL = 507


def add_otlp_routes(
    app: web.Application,
    writer: BatchWriter,
    max_body: int,
    read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
) -> None:
    """Mount the OTLP routes on ``app``; ``writer`` must be started before the app serves.

    A body not received within ``read_timeout_s`` is refused (400), so slow senders cannot
    hold connections open.
    """
    app[WRITER_KEY] = writer
    app[MAX_BODY_KEY] = max_body
    app[READ_TIMEOUT_KEY] = read_timeout_s
    app.router.add_post(TRACES_PATH, _traces)
    app.router.add_post(METRICS_PATH, _metrics)


def _is_json(request: web.Request) -> bool:
    return request.content_type.lower() == JSON_TYPE


async def _read_body(request: web.Request) -> bytes:
    limit = request.app[MAX_BODY_KEY]
    if request.content_length is not None and request.content_length > limit:
        raise PayloadError(
            f"body of {request.content_length} bytes exceeds {limit}", too_large=True
        )
    seconds = request.app[READ_TIMEOUT_KEY]
    try:
        async with asyncio.timeout(seconds):  # a slow or stalled sender holds nothing for long
            body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadError(f"body exceeds {limit} bytes", too_large=True) from exc
    except TimeoutError:
        raise PayloadError(f"body not received within {seconds:g} s") from None
    return decompress(body, request.headers.get("Content-Encoding", ""), limit)


async def _traces(request: web.Request) -> web.Response:
    try:
        body = await _read_body(request)
        await request.app[WRITER_KEY].store(body, request.content_type)
    except PayloadError as exc:
        return _error(request, exc)
    except StoreFull as exc:  # said once: the log is on the same full disk
        if not request.app.get(_FULL_SAID_KEY, False):
            request.app[_FULL_SAID_KEY] = True
            log.error("the disk under the trace store is full; batches are refused (%s)", exc)
        return _error(request, PayloadError(f"disk full: {exc}"), http_status=_DISK_FULL)
    except Exception as exc:  # a storage failure: retryable for the exporter
        log.exception("storing a batch failed")
        return _error(request, PayloadError(f"store failed: {exc}"), http_status=503)
    return _ok(request, ExportTraceServiceResponse())


async def _metrics(request: web.Request) -> web.Response:
    """Metrics are validated and acknowledged, not stored: the store is for traces."""
    try:
        body = await _read_body(request)
        message = ExportMetricsServiceRequest()
        if _is_json(request):
            json_format.Parse(body, message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(body)
    except PayloadError as exc:
        return _error(request, exc)
    except Exception as exc:  # protobuf / json_format parse errors
        return _error(request, PayloadError(f"invalid OTLP metrics payload: {exc}"))
    return _ok(request, ExportMetricsServiceResponse())


def _ok(request: web.Request, message: object) -> web.Response:
    if _is_json(request):
        return web.Response(body=b"{}", content_type=JSON_TYPE)
    return web.Response(body=message.SerializeToString(), content_type=PROTOBUF_TYPE)  # type: ignore[attr-defined]


def _error(request: web.Request, exc: PayloadError, http_status: int | None = None) -> web.Response:
    code = _RESOURCE_EXHAUSTED if exc.too_large else _INVALID_ARGUMENT
    if http_status == 503:
        code = _UNAVAILABLE
    elif http_status == _DISK_FULL:
        code = _RESOURCE_EXHAUSTED
    status = Status(code=code, message=str(exc))
    http_status = http_status or (413 if exc.too_large else 400)
    if http_status != _DISK_FULL:
        log.warning("rejected OTLP payload (%s): %s", http_status, exc)
    if _is_json(request):
        body = json_format.MessageToJson(status, indent=None).encode()
        return web.Response(status=http_status, body=body, content_type=JSON_TYPE)
    return web.Response(
        status=http_status, body=status.SerializeToString(), content_type=PROTOBUF_TYPE
    )
