"""Build the SDK span and metric exporters a :class:`TelemetrySettings` names.

Imports of the OTLP packages happen here, lazily, so a process with tracing off never loads
them. Endpoints follow the SDK's rules: a per-signal ``OTEL_EXPORTER_OTLP_*_ENDPOINT`` is read
by the exporter itself; otherwise the HTTP exporter gets ``<base>/v1/traces`` (or
``/v1/metrics``) and the gRPC exporter the base URL.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import NamedTuple, TypedDict, TypeVar

from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

import rollgym.environment_variables as env
from rollgym.telemetry.pipeline.frames import METRICS_PATH, TRACES_PATH
from rollgym.telemetry.settings import ExporterKind, TelemetrySettings


def _headers(
    settings: TelemetrySettings, store_token: str | None, signal_env: str
) -> dict[str, str] | None:
    """Headers from the config's ``headers_env``; None lets the SDK read ``OTEL_*_HEADERS``.

    Sending to the run's local trace store behind a token (``store_token``, else the
    ``ROLLGYM_TRACE_STORE_TOKEN`` a launched server inherits), the bearer header is all; a
    signal sent elsewhere by its own ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` never gets it.
    """
    if settings.to_local_store and not os.environ.get(signal_env):
        token = store_token or os.environ.get(env.ROLLGYM_TRACE_STORE_TOKEN)
        return {"authorization": f"Bearer {token}"} if token else None
    if os.environ.get(env.OTEL_EXPORTER_OTLP_HEADERS) or not settings.headers_env:
        return None
    raw = os.environ.get(settings.headers_env)
    if not raw:
        return None
    from opentelemetry.util.re import parse_env_headers

    return dict(parse_env_headers(raw, liberal=True))


def _signal_endpoint(settings: TelemetrySettings, signal_env: str, path: str) -> str | None:
    if os.environ.get(signal_env) or not settings.endpoint:
        return None
    if settings.protocol == "grpc":
        return settings.endpoint
    return settings.endpoint.rstrip("/") + path


class OtlpOptions(TypedDict):
    """The keywords both OTLP exporters (HTTP and gRPC) of either signal are built with."""

    endpoint: str | None
    headers: dict[str, str] | None
    timeout: float


def _otlp_options(
    settings: TelemetrySettings, store_token: str | None, signal_env: str, path: str
) -> OtlpOptions:
    """Endpoint, headers and time limit of one signal's exporter (None: the SDK reads
    ``OTEL_*`` itself)."""
    return {
        "endpoint": _signal_endpoint(settings, signal_env, path),
        "headers": _headers(settings, store_token, signal_env),
        "timeout": settings.export_timeout_s,
    }


def otlp_http_traces_target(
    settings: TelemetrySettings, store_token: str | None = None
) -> tuple[str, dict[str, str], str | None]:
    """(URL, headers, compression) the OTLP/HTTP trace exporter would use, by the SDK's rules.

    For rollgym's exporter child (:mod:`rollgym.telemetry.pipeline`), which posts what it
    encodes itself but must reach the same place with the same headers as the SDK exporter.
    """
    from opentelemetry.util.re import parse_env_headers

    url = (
        os.environ.get(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
        or _signal_endpoint(settings, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, TRACES_PATH)
        or "http://localhost:4318" + TRACES_PATH
    )
    headers = _headers(settings, store_token, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    if headers is None:
        raw = os.environ.get(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS) or os.environ.get(
            env.OTEL_EXPORTER_OTLP_HEADERS, ""
        )
        headers = dict(parse_env_headers(raw, liberal=True)) if raw else {}
    compression = (
        os.environ.get(env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION)
        or os.environ.get(env.OTEL_EXPORTER_OTLP_COMPRESSION)
        or ""
    ).strip().lower() or None
    return url, headers, compression


def otlp_grpc_traces_target(
    settings: TelemetrySettings, store_token: str | None = None
) -> tuple[str, OtlpOptions]:
    """(URL, exporter keywords) of the OTLP/gRPC trace exporter, by the SDK's rules.

    For rollgym's exporter child, which builds the SDK's gRPC exporter with these keywords
    (``None``: the exporter reads ``OTEL_*`` itself, from the environment the child
    inherits); the URL is where a shutdown probes whether anything listens.
    """
    options = _otlp_options(
        settings, store_token, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, TRACES_PATH
    )
    url = (
        os.environ.get(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
        or options["endpoint"]
        or os.environ.get(env.OTEL_EXPORTER_OTLP_ENDPOINT)
        or "http://localhost:4317"
    )
    return url, options


class _Signal(NamedTuple):
    """What tells one signal's exporters apart; building them is otherwise the same."""

    #: The per-signal endpoint variable (when set, the SDK exporter reads it itself).
    endpoint_env: str
    #: The path the HTTP exporter posts to under the configured base endpoint.
    path: str
    #: The exporter's module, named alike under ``otlp.proto.http`` and ``otlp.proto.grpc``.
    module: str
    #: The exporter's class in that module.
    otlp_class: str


_TRACES = _Signal(
    env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, TRACES_PATH, "trace_exporter", "OTLPSpanExporter"
)
_METRICS = _Signal(
    env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, METRICS_PATH, "metric_exporter", "OTLPMetricExporter"
)

_Exporter = TypeVar("_Exporter", SpanExporter, MetricExporter)


def _build(
    kind: ExporterKind,
    console: Callable[[], _Exporter],
    signal: _Signal,
    settings: TelemetrySettings,
    store_token: str | None,
) -> _Exporter | None:
    """One signal's exporter: the console one, the OTLP one (gRPC or HTTP), or None.

    ``console`` also fixes the exporter's type: the OTLP class found by name is that signal's.
    """
    if kind == "console":
        return console()
    if kind != "otlp":
        return None
    proto = "grpc" if settings.protocol == "grpc" else "http"
    module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{proto}.{signal.module}")
    options = _otlp_options(settings, store_token, signal.endpoint_env, signal.path)
    exporter: _Exporter = getattr(module, signal.otlp_class)(**options)
    return exporter


def build_span_exporter(
    settings: TelemetrySettings, store_token: str | None = None
) -> SpanExporter | None:
    """The span exporter, or None when traces are off."""
    return _build(settings.traces_exporter, ConsoleSpanExporter, _TRACES, settings, store_token)


def build_metric_exporter(
    settings: TelemetrySettings, store_token: str | None = None
) -> MetricExporter | None:
    """The metric exporter, or None when metrics are off."""
    return _build(
        settings.metrics_exporter,
        ConsoleMetricExporter,
        _METRICS,
        settings,
        store_token,
    )
