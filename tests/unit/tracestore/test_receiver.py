"""The OTLP/HTTP receiver: real SDK exporter, JSON, gzip, bad and oversized payloads."""

from __future__ import annotations

import base64
import gzip
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link

from rollgym.telemetry import names
from rollgym.tracestore.store_process import TraceStoreProcess


def _provider(process: TraceStoreProcess, **exporter_options: object) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({names.RUN_ID: "run-1"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=process.traces_endpoint, **exporter_options))
    )
    return provider


def _count(process: TraceStoreProcess) -> int:
    with sqlite3.connect(process.db_path) as conn:
        return conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0]


def _post(url: str, body: bytes, content_type: str, encoding: str | None = None):
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", content_type)
    if encoding:
        request.add_header("Content-Encoding", encoding)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read(), answer.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers["Content-Type"]


def test_sdk_exporter_spans_links_events_resource(store: TraceStoreProcess) -> None:
    tracer = _provider(store).get_tracer("t")
    with tracer.start_as_current_span(names.SPAN_JOB) as job:
        pass
    with tracer.start_as_current_span(
        names.SPAN_DISPATCH,
        links=[Link(job.get_span_context(), {"kind": "job"})],
        attributes={names.ROLLOUT_ID: "0-0", names.ROLLOUT_ATTEMPT: 0},
    ) as dispatch:
        dispatch.add_event("retry", {"n": 1})
        with tracer.start_as_current_span(names.SPAN_ROLLOUT, attributes={names.ROLLOUT_ID: "0-0"}):
            pass
    with sqlite3.connect(store.db_path) as conn:
        rows = conn.execute(
            "SELECT name, rollout_id, run_id, events, parent_span_id FROM spans ORDER BY start_ns"
        ).fetchall()
        link = conn.execute(
            "SELECT linked_trace_id, linked_span_id, attributes FROM links"
        ).fetchone()
        run_ids = [r[0] for r in conn.execute("SELECT run_id FROM resources")]
    assert [r[0] for r in rows] == [names.SPAN_JOB, names.SPAN_DISPATCH, names.SPAN_ROLLOUT]
    assert rows[1][1] == "0-0" and rows[1][2] == "run-1"
    assert orjson.loads(rows[1][3])[0]["name"] == "retry"
    assert rows[1][4] is None and rows[2][4] is not None
    context = job.get_span_context()
    assert link[0] == context.trace_id.to_bytes(16, "big")
    assert link[1] == context.span_id.to_bytes(8, "big")
    assert orjson.loads(link[2]) == {"kind": "job"}
    assert run_ids == ["run-1"]


def test_gzip_exporter(store: TraceStoreProcess) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression

    tracer = _provider(store, compression=Compression.Gzip).get_tracer("t")
    with tracer.start_as_current_span("gzipped"):
        pass
    assert _count(store) == 1


def _json_request(trace_hex: str, span_hex: str) -> dict:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes.fromhex(trace_hex)
    span.span_id = bytes.fromhex(span_hex)
    span.name = "from-json"
    span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
    document = json_format.MessageToDict(request)
    for item in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # OTLP JSON: hex ids
        item["traceId"] = base64.b64decode(item["traceId"]).hex()
        item["spanId"] = base64.b64decode(item["spanId"]).hex()
    return document


@pytest.mark.parametrize("gzipped", [False, True])
def test_json_payload_hex_ids(store: TraceStoreProcess, gzipped: bool) -> None:
    trace_hex, span_hex = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    body = orjson.dumps(_json_request(trace_hex, span_hex))
    status, answer, content_type = _post(
        store.traces_endpoint,
        gzip.compress(body) if gzipped else body,
        "application/json",
        "gzip" if gzipped else None,
    )
    assert (status, answer, content_type) == (200, b"{}", "application/json")
    with sqlite3.connect(store.db_path) as conn:
        trace_id, span_id = conn.execute("SELECT trace_id, span_id FROM spans").fetchone()
    assert (trace_id.hex(), span_id.hex()) == (trace_hex, span_hex)


def test_malformed_protobuf_and_json_answer_status(store: TraceStoreProcess) -> None:
    status, body, _ = _post(
        store.traces_endpoint, b"\xff\xff\xff garbage", "application/x-protobuf"
    )
    assert status == 400
    assert Status.FromString(body).message.startswith("invalid OTLP protobuf")
    status, body, _ = _post(store.traces_endpoint, b"{not json", "application/json")
    assert status == 400 and "invalid JSON" in orjson.loads(body)["message"]
    status, _, _ = _post(
        store.traces_endpoint, orjson.dumps({"resourceSpans": 3}), "application/json"
    )
    assert status == 400
    status, _, _ = _post(store.traces_endpoint, b"x", "text/plain")
    assert status == 415  # not an OTLP media type (and what a cross-site page could send)
    assert _count(store) == 0


def test_batch_with_one_bad_span_is_not_half_written(store: TraceStoreProcess) -> None:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    good = spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="good")
    good.end_time_unix_nano = 1
    spans.add(trace_id=b"\x01" * 15, span_id=b"\x03" * 8, name="bad-id-length")
    status, _, _ = _post(
        store.traces_endpoint, request.SerializeToString(), "application/x-protobuf"
    )
    assert status == 400
    assert _count(store) == 0


def test_oversized_and_gzip_bomb_get_413(store: TraceStoreProcess) -> None:
    big = b"\x00" * (300 * 1024)  # limit in the fixture: 256 KiB
    status, body, _ = _post(store.traces_endpoint, big, "application/x-protobuf")
    assert status == 413 and Status.FromString(body).code == 8
    status, _, _ = _post(
        store.traces_endpoint, gzip.compress(big), "application/x-protobuf", "gzip"
    )
    assert status == 413
    status, _, _ = _post(store.traces_endpoint, b"not gzip", "application/x-protobuf", "gzip")
    assert status == 400
    assert _count(store) == 0


def test_metrics_are_acknowledged(store: TraceStoreProcess) -> None:
    exporter = OTLPMetricExporter(endpoint=store.endpoint + "/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("t").create_counter(names.METRIC_ROLLOUT_COMPLETED).add(1, {"x": "y"})
    assert reader.force_flush()
    provider.shutdown()
    status, _, _ = _post(store.endpoint + "/v1/metrics", b"\xff\xff", "application/x-protobuf")
    assert status == 400


def test_stop_commits_everything_accepted(tmp_path: Path, store: TraceStoreProcess) -> None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=store.traces_endpoint), max_export_batch_size=100
        )
    )
    tracer = provider.get_tracer("t")
    for index in range(1000):
        with tracer.start_as_current_span(f"s{index}"):
            pass
    provider.shutdown()
    assert store.stop() == 0
    assert _count(store) == 1000
    assert (
        not Path(str(store.db_path) + "-wal").exists()
        or Path(str(store.db_path) + "-wal").stat().st_size == 0
    )
