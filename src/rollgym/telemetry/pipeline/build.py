"""Build the pipeline for one process: rollgym's provider and the exporter side it feeds.

One provider (:class:`~rollgym.telemetry.pipeline.recording.RecordingTracerProvider`) always;
its records go to the exporter child for OTLP, over HTTP or gRPC (:func:`build_process_pipeline`),
or to the in-process exporter side (:func:`build_in_process_pipeline`: the console, an
exporter passed in, OTLP when the child cannot start).
"""

from __future__ import annotations

import os

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

import rollgym.environment_variables as env
from rollgym.telemetry.exporters import (
    OtlpOptions,
    otlp_grpc_traces_target,
    otlp_http_traces_target,
)
from rollgym.telemetry.pipeline.in_process import InProcessExport
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.settings import TelemetrySettings

__all__ = [
    "STORE_OTLP_ENV",
    "build_in_process_pipeline",
    "build_process_pipeline",
    "posts_records",
    "uses_exporter_child",
]

#: Set to ``1`` to send OTLP to the run's own trace store too (the fallback from records).
STORE_OTLP_ENV = env.ROLLGYM_STORE_OTLP


def uses_exporter_child(settings: TelemetrySettings) -> bool:
    """Whether this process's spans go to the exporter child (OTLP, HTTP or gRPC)."""
    return settings.traces_exporter == "otlp" and settings.protocol in ("http/protobuf", "grpc")


def posts_records(settings: TelemetrySettings) -> bool:
    """Whether the exporter child posts span records rather than OTLP: to the run's own trace
    store over HTTP only (``docs/design/span-pipeline.md``), unless :data:`STORE_OTLP_ENV`."""
    return (
        settings.to_local_store
        and settings.protocol == "http/protobuf"
        and os.environ.get(STORE_OTLP_ENV) != "1"
    )


def build_process_pipeline(
    settings: TelemetrySettings,
    resource: Resource,
    sampler: Sampler | None,
    id_generator: IdGenerator | None,
    store_token: str | None = None,
) -> tuple[RecordingTracerProvider, SpanShipper]:
    """Start the exporter child and return the provider whose spans feed it."""
    grpc: OtlpOptions | None = None
    if settings.protocol == "grpc":
        url, grpc = otlp_grpc_traces_target(settings, store_token)
        headers: dict[str, str] = {}
        compression = None
    else:
        url, headers, compression = otlp_http_traces_target(settings, store_token)
    shipper = SpanShipper(
        url=url,
        headers=headers,
        compression=compression,
        resource=dict(resource.attributes),
        timeout_s=settings.export_timeout_s,
        patience_s=settings.flush_timeout_s,
        max_queue_size=settings.max_queue_size,
        max_export_batch_size=settings.max_export_batch_size,
        schedule_delay_ms=settings.schedule_delay_ms,
        # the run's own trace store keeps each span once: a batch whose connection broke
        # after it went out is sent again there instead of counted unknown
        idempotent=settings.to_local_store,
        records=posts_records(settings),
        grpc=grpc,
    )
    return _provider(shipper, sampler, id_generator), shipper


def build_in_process_pipeline(
    exporter: SpanExporter,
    settings: TelemetrySettings,
    resource: Resource,
    sampler: Sampler | None,
    id_generator: IdGenerator | None,
    *,
    synchronous: bool = False,
) -> tuple[RecordingTracerProvider, InProcessExport]:
    """The provider whose records ``exporter`` gets in this process (batched, or each span as
    it ends when ``synchronous``)."""
    export = InProcessExport(
        exporter,
        resource,
        synchronous=synchronous,
        max_queue_size=settings.max_queue_size,
        max_export_batch_size=settings.max_export_batch_size,
        schedule_delay_ms=settings.schedule_delay_ms,
        patience_s=settings.flush_timeout_s,
    )
    return _provider(export, sampler, id_generator), export


def _provider(
    side: SpanShipper | InProcessExport, sampler: Sampler | None, id_generator: IdGenerator | None
) -> RecordingTracerProvider:
    """The one provider, its records going to ``side`` (either exporter side)."""
    return RecordingTracerProvider(
        side.on_end,
        sampler=sampler,
        id_generator=id_generator,
        on_shutdown=side.shutdown,
        on_flush=side.flush,
    )
