"""Build the pipeline for one process: the exporter child and the provider feeding it."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

import rollgym.environment_variables as env
from rollgym.telemetry.exporters import otlp_http_traces_target
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.settings import TelemetrySettings

__all__ = ["build_process_pipeline", "wanted"]


def wanted(settings: TelemetrySettings, environ: Any = None) -> bool:
    """Whether this process's spans go through the child-process pipeline."""
    environ = os.environ if environ is None else environ
    choice = (environ.get(env.ROLLGYM_SPAN_PIPELINE) or "process").strip().lower()
    return (
        choice != "sdk"
        and settings.traces_exporter == "otlp"
        and settings.protocol == "http/protobuf"
    )


def build_process_pipeline(
    settings: TelemetrySettings,
    resource: Resource,
    sampler: Sampler | None,
    id_generator: IdGenerator | None,
    store_token: str | None = None,
) -> tuple[RecordingTracerProvider, SpanShipper]:
    """Start the exporter child and return the provider whose spans feed it."""
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
    )
    provider = RecordingTracerProvider(
        shipper.on_end,
        sampler=sampler,
        id_generator=id_generator,
        on_shutdown=shipper.shutdown,
        on_flush=shipper.flush,
    )
    return provider, shipper
