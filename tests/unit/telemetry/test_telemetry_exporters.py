"""Which SDK exporter a setting builds, and where it sends (the SDK's endpoint rules)."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.telemetry.exporters import build_metric_exporter, build_span_exporter
from rollgym.telemetry.groups import PRESETS, gate
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import setup_telemetry


def test_http_exporter_posts_to_v1_traces_and_v1_metrics(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    s = TelemetrySettings(
        traces_exporter="otlp", metrics_exporter="otlp", endpoint="http://h:4318/"
    )
    span_exporter = build_span_exporter(s)
    assert isinstance(span_exporter, OTLPSpanExporter)
    assert span_exporter._endpoint == "http://h:4318/v1/traces"
    metric_exporter = build_metric_exporter(s)
    assert isinstance(metric_exporter, OTLPMetricExporter)
    assert metric_exporter._endpoint == "http://h:4318/v1/metrics"


def test_per_signal_env_endpoint_is_left_to_the_sdk(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://elsewhere:1/custom")
    s = TelemetrySettings(traces_exporter="otlp", endpoint="http://h:4318")
    assert build_span_exporter(s)._endpoint == "http://elsewhere:1/custom"


def test_grpc_console_none():
    grpc = build_span_exporter(
        TelemetrySettings(traces_exporter="otlp", protocol="grpc", endpoint="http://127.0.0.1:4317")
    )
    assert isinstance(grpc, GrpcExporter)
    grpc.shutdown()
    assert isinstance(
        build_span_exporter(TelemetrySettings(traces_exporter="console")), ConsoleSpanExporter
    )
    assert isinstance(
        build_metric_exporter(TelemetrySettings(metrics_exporter="console")), ConsoleMetricExporter
    )
    assert build_span_exporter(TelemetrySettings()) is None
    assert build_metric_exporter(TelemetrySettings()) is None


def test_headers_from_the_configured_env_var(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
    monkeypatch.setenv("MY_HEADERS", "x-honeycomb-team=abc,x-other=1")
    exporter = build_span_exporter(
        TelemetrySettings(traces_exporter="otlp", endpoint="http://h:1", headers_env="MY_HEADERS")
    )
    headers = exporter._client._headers
    assert headers["x-honeycomb-team"] == "abc" and headers["x-other"] == "1"


def test_shutting_down_an_old_handle_keeps_the_new_handles_gate():
    settings = TelemetrySettings(groups=PRESETS["default"], traces_exporter="otlp")
    old = setup_telemetry(
        settings, service_name="a", run_id="r1", span_exporter=InMemorySpanExporter()
    )
    new = setup_telemetry(
        settings, service_name="a", run_id="r2", span_exporter=InMemorySpanExporter()
    )
    old.shutdown()
    assert gate.tracing and gate.rollout
    new.shutdown()
    assert not gate.tracing
