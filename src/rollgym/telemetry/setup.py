"""Set telemetry up once per process and hand back a handle that flushes and counts.

``setup_telemetry`` installs rollgym's one span pipeline for this process and sets the span
gate once: ``gate.<group>`` is "group enabled AND a trace exporter is active", so with tracing
off every span-only call site is one attribute load and a branch.

The pipeline (:mod:`rollgym.telemetry.pipeline`): rollgym's recording provider
(:class:`~rollgym.telemetry.pipeline.recording.RecordingTracerProvider`, the same samplers and
id generators as the SDK's) turns each finished span into one record and hands it to an
exporter side. For OTLP (the run's local trace store, or any OTLP backend: what a run uses
by default) that is the :class:`~rollgym.telemetry.pipeline.shipper.SpanShipper`, which ships
records in batches to an exporter child process that encodes OTLP/HTTP and posts it, or hands
them to the SDK's OTLP/gRPC exporter. For the console, an exporter passed in (tests,
benches), or OTLP when the child cannot start, it is
:class:`~rollgym.telemetry.pipeline.in_process.InProcessExport`, which turns the same records
into ``ReadableSpan`` s for the SDK's exporter on a thread of this process.
An embedder's own recording provider (``embedded``) is traced into instead, untouched.

Export never touches a rollout: bounded queues, background work, bounded per-request
timeouts, every loss counted in one :class:`~rollgym.telemetry.span_counts.SpanCounts`; and
:meth:`TelemetryHandle.shutdown` flushes on a helper thread with a deadline and never raises.
The meter provider is the SDK's, with a periodic reader.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from opentelemetry import metrics as metrics_api
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

import rollgym.environment_variables as env
from rollgym.telemetry import names, young_gc
from rollgym.telemetry._state import INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, state, tracer_of
from rollgym.telemetry.content_capture import configure_capture
from rollgym.telemetry.embedder import caller_provider
from rollgym.telemetry.exporters import build_metric_exporter, build_span_exporter
from rollgym.telemetry.groups import ALL_GROUPS, SpanGroup, configure_gate, gate
from rollgym.telemetry.loss_report import loss_warnings
from rollgym.telemetry.metrics import HttpClientMetrics, RolloutMetrics, register_dropped_spans
from rollgym.telemetry.pipeline import build as pipeline
from rollgym.telemetry.pipeline.in_process import InProcessExport
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.sampling import (
    SingleTraceIdGenerator,
    TimeOrderedIdGenerator,
    make_sampler,
    run_trace_id,
)
from rollgym.telemetry.settings import DEFAULT_FLUSH_TIMEOUT_S, TelemetrySettings, server_env
from rollgym.telemetry.span_counts import SpanCountRecord, empty_record
from rollgym.urls import redact_text

__all__ = [
    "TelemetryHandle",
    "TelemetrySettings",
    "install_for_tests",
    "is_trace_exporter_active",
    "server_env",
    "setup_telemetry",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
#: Loggers of the SDK exporters, which log every failed batch; we let each message through once.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk._shared_internal",
)
#: How long a process waits, at its end, for queued spans to reach the backend (the default of
#: ``telemetry.flush_timeout_s``): a backend merely slow to start must lose nothing.
DEFAULT_SHUTDOWN_TIMEOUT_S = DEFAULT_FLUSH_TIMEOUT_S
_METRIC_INTERVAL_MS = 10_000


@dataclass
class TelemetryHandle:
    """What :func:`setup_telemetry` returns: recorders, counts, and a safe shutdown."""

    #: rollgym's provider (:mod:`rollgym.telemetry.pipeline`); None when rollgym records nothing.
    tracer_provider: RecordingTracerProvider | None = None
    meter_provider: MeterProvider | None = None
    #: The exporter behind ``meter_provider``'s reader, when rollgym built it.
    metric_exporter: MetricExporter | None = None
    #: The exporter side the provider's records go to, and its counts.
    processor: SpanShipper | InProcessExport | None = None
    metrics: RolloutMetrics | None = None
    http_metrics: HttpClientMetrics | None = None
    #: The embedder's own provider the gate traces into (never shut down by rollgym).
    caller_provider: trace.TracerProvider | None = None
    #: Default limit of :meth:`shutdown` (``telemetry.flush_timeout_s``).
    flush_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    #: Whether this handle holds the larger young GC threshold (:mod:`rollgym.telemetry.young_gc`).
    holds_young_gc: bool = False
    _closed: bool = field(default=False, repr=False)
    _rollouts_ended_at: float | None = field(default=None, repr=False)

    def counts(self) -> SpanCountRecord:
        """This process's span-count record, for ``summary.json``."""
        if self.processor is None:
            return empty_record()
        return self.processor.counts.snapshot()

    def dropped_by_reason(self) -> dict[str, int]:
        return dict(self.processor.counts.dropped) if self.processor is not None else {}

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Close the gates, flush what is queued, stop the providers. Bounded; never raises.

        ``timeout_s`` defaults to the handle's ``flush_timeout_s``. Spans still unsent when it
        runs out are counted as dropped (reason ``shutdown``) and the loss is logged as a
        warning with its count.
        """
        if self._closed:
            return
        self._closed = True
        timeout_s = shutdown_budget(
            self.flush_timeout_s if timeout_s is None else timeout_s,
            self._rollouts_ended_at,
            time.monotonic(),
        )
        deadline = time.monotonic() + timeout_s
        if self.processor is not None:
            # The one end-of-rollouts timestamp: the shipper's probe grace counts from it too.
            self.processor.stop_retrying_at(deadline, rollouts_ended_at=self._rollouts_ended_at)
        installed = self.tracer_provider or self.caller_provider
        if installed is not None and state.provider is installed:
            configure_gate((), tracing_active=False)
            configure_capture(False)
            state.reset()
        if self.holds_young_gc:
            self.holds_young_gc = False
            young_gc.release()
        worker = threading.Thread(
            target=self._shutdown_providers, name="rollgym-telemetry-shutdown"
        )
        worker.daemon = True
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            _log.warning(
                "telemetry shutdown did not finish within %.1fs; unsent spans are counted as "
                "dropped",
                timeout_s,
            )
        if self.processor is not None and worker.is_alive():
            # A child's last lines first: the batch it was sending is unknown, not dropped.
            self.processor.stop_now()
        if self.processor is not None:
            self.processor.counts.close()
            _report_loss(self.processor.counts.snapshot())

    def note_rollouts_ended(self) -> None:
        """The rollouts are over; only shutdown is left. A dead endpoint's grace at shutdown
        counts from here, so the driver (which shuts down after its servers) does not wait it
        out a second time; nor does the flush limit, which counts from here too. The handle
        keeps this one timestamp and hands it to the span shipper at :meth:`shutdown`."""
        if self._rollouts_ended_at is None:
            self._rollouts_ended_at = time.monotonic()

    def _shutdown_providers(self) -> None:
        """Spans and metrics shut down side by side: each may wait on a slow or dead endpoint
        for seconds (the metric exporter retries its last export), and one after the other
        those waits would add up."""
        providers = [p for p in (self.tracer_provider, self.meter_provider) if p is not None]
        helpers = [
            threading.Thread(target=_shutdown_quietly, args=(p,), daemon=True)
            for p in providers[1:]
        ]
        for helper in helpers:
            helper.start()
        if providers:
            _shutdown_quietly(providers[0])
        if self.processor is not None and self.processor.gave_up_on_endpoint:
            self._stop_metric_retries()
        for helper in helpers:
            helper.join()

    def _stop_metric_retries(self) -> None:
        """The span side found nothing listening through its grace: the metric exporter's
        last export (retrying for its whole timeout) is stopped too. Its reader shuts it down
        again afterwards; the SDK's warnings about both are ours to expect, so they are dropped."""
        if self.metric_exporter is None:
            return
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(_drop_our_shutdown_lines)
        try:
            self.metric_exporter.shutdown()
        except Exception:
            _log.debug("metric exporter shutdown failed", exc_info=True)


#: What the SDK logs when its exporter is shut down mid-retry and again by its reader.
_OUR_SHUTDOWN_LINES = ("Exporter already shutdown", "Shutdown in progress, aborting retry")


def _drop_our_shutdown_lines(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_OUR_SHUTDOWN_LINES)


#: How the SDK's OTLP exporters begin the line they log before each retry.
_RETRY_LINE = "Transient error"


def _drop_retry_lines(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_RETRY_LINE)


def quiet_retries_to_unreachable_endpoint() -> None:
    """This process already said, in its own line, that the OTLP endpoint is unreachable: the
    SDK exporters' ``Transient error ... Max retries exceeded ... retrying in 0.90s`` lines
    would say it again, as a library's message. Failures that are not retries still show."""
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if _drop_retry_lines not in logger.filters:
            logger.addFilter(_drop_retry_lines)


#: What a process whose flush limit ran out during its servers' shutdown still gets for spans
#: it recorded last: a healthy backend answers in far less, and only a broken one waits it out.
LAST_SPANS_FLOOR_S = 5.0


def shutdown_budget(flush_timeout_s: float, rollouts_ended_at: float | None, now: float) -> float:
    """How long a shutdown at ``now`` may wait for unsent spans: ``flush_timeout_s`` counted
    from the end of the rollouts when that is known (the driver stops after its servers, which
    waited on the same backend meanwhile), never under :data:`LAST_SPANS_FLOOR_S` (or the whole
    limit, if that is smaller)."""
    if rollouts_ended_at is None:
        return flush_timeout_s
    left = rollouts_ended_at + flush_timeout_s - now
    return max(left, min(flush_timeout_s, LAST_SPANS_FLOOR_S))


def _shutdown_quietly(provider: RecordingTracerProvider | MeterProvider) -> None:
    try:
        provider.shutdown()
    except Exception:
        _log.debug("telemetry provider shutdown failed", exc_info=True)


def is_trace_exporter_active() -> bool:
    """The single answer to "is a trace exporter active in this process"."""
    return gate.tracing


def setup_telemetry(
    settings: TelemetrySettings,
    *,
    service_name: str,
    run_id: str,
    server_name: str | None = None,
    server_kind: str | None = None,
    server_instance: str | None = None,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
    embedded: bool = False,
    store_token: str | None = None,
) -> TelemetryHandle:
    """Install providers for this process and configure the gate.

    ``server_instance`` names this replica of the server (``name`` or ``name@<i>``): it makes
    ``service.instance.id`` (``<run id>:<instance>``), so the replicas of one server are one
    server in every query by ``gym.server.name`` and still apart where a backend needs each
    process's metric streams apart.
    ``span_exporter`` / ``metric_reader`` replace the configured exporters (tests, benches).
    With ``OTEL_SDK_DISABLED`` or nothing to export, no provider is built and every gate stays
    closed. ``store_token`` is the bearer token of the run's local trace store when it listens
    beyond loopback. ``embedded`` (the driver sets it) traces into an embedder's own recording global
    provider when there is one, instead of building a provider: the trainer's provider is the
    exporter, and it is never replaced or shut down.
    """
    _quiet_exporter_logs()
    handle = TelemetryHandle(flush_timeout_s=settings.flush_timeout_s)
    caller = caller_provider() if embedded and settings.groups else None
    resource = _resource(service_name, run_id, server_name, server_kind, server_instance)
    if caller is not None:
        handle.caller_provider = caller
        state.tracer = tracer_of(caller)
        state.provider = caller
    elif span_exporter is not None:
        _start_in_process_pipeline(handle, span_exporter, settings, resource, run_id)
    elif not (
        pipeline.uses_exporter_child(settings)
        and _start_process_pipeline(handle, settings, resource, run_id, store_token)
    ):
        exporter = _safe(build_span_exporter, settings, store_token)
        if exporter is not None:
            _start_in_process_pipeline(handle, exporter, settings, resource, run_id)
    reader = metric_reader
    if reader is None:
        metric_exporter = _safe(build_metric_exporter, settings, store_token)
        handle.metric_exporter = metric_exporter
        if metric_exporter is not None:
            reader = PeriodicExportingMetricReader(
                metric_exporter,
                export_interval_millis=_METRIC_INTERVAL_MS,
                export_timeout_millis=settings.export_timeout_s * 1000,
            )
    if reader is not None:
        handle.meter_provider = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )
        _install_meter_provider(handle.meter_provider)
        meter = handle.meter_provider.get_meter(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION)
        handle.metrics = RolloutMetrics(meter)
        handle.http_metrics = HttpClientMetrics(meter)
        if handle.processor is not None:
            counts = handle.processor.counts
            register_dropped_spans(meter, lambda: list(counts.dropped.items()))
    tracing = handle.tracer_provider is not None or handle.caller_provider is not None
    if handle.tracer_provider is not None:  # ours records here (never an embedder's provider)
        young_gc.hold()  # measured: the traced driver's young collections (module docstring)
        handle.holds_young_gc = True
    configure_gate(settings.groups, tracing_active=tracing)
    configure_capture(settings.capture_content, settings.capture_max_bytes)
    return handle


def install_for_tests(
    exporter: SpanExporter,
    groups: Iterable[SpanGroup] = ALL_GROUPS,
    *,
    run_id: str = "test-run",
    single_trace: bool = False,
) -> TelemetryHandle:
    """rollgym's provider, its spans handed to ``exporter`` (e.g. an ``InMemorySpanExporter``)
    as ``ReadableSpan`` s, each as it ends.

    The provider and the records are the ones a run uses; only the exporter side is the
    in-memory sink, synchronous (no batching), so a test can assert right after its block.
    Replaces the tracer our span helpers use, even when a global provider was already set.
    """
    settings = TelemetrySettings(
        groups=frozenset(groups), traces_exporter="otlp", single_trace=single_trace
    )
    resource = _resource("rollgym-test", run_id, None, None)
    handle = TelemetryHandle()
    _start_in_process_pipeline(handle, exporter, settings, resource, run_id, synchronous=True)
    configure_gate(settings.groups, tracing_active=True)
    return handle


def _start_in_process_pipeline(
    handle: TelemetryHandle,
    exporter: SpanExporter,
    settings: TelemetrySettings,
    resource: Resource,
    run_id: str,
    *,
    synchronous: bool = False,
) -> None:
    """rollgym's provider, its records exported by ``exporter`` in this process."""
    provider, export = pipeline.build_in_process_pipeline(
        exporter,
        settings,
        resource,
        make_sampler(settings.sampler, settings.sampler_arg),
        _id_generator(settings, run_id),
        synchronous=synchronous,
    )
    _install_tracer_provider(provider)
    handle.tracer_provider = provider
    handle.processor = export


def _id_generator(settings: TelemetrySettings, run_id: str) -> IdGenerator:
    if settings.single_trace:
        return SingleTraceIdGenerator(run_trace_id(run_id))
    return TimeOrderedIdGenerator()


def _install_tracer_provider(provider: trace.TracerProvider) -> None:
    """Our tracer from now on; also the global provider if this is the process's first."""
    state.created.add(provider)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)  # first setup in this process: make it global too
    state.tracer = tracer_of(provider)
    state.provider = provider


def _start_process_pipeline(
    handle: TelemetryHandle,
    settings: TelemetrySettings,
    resource: Resource,
    run_id: str,
    store_token: str | None,
) -> bool:
    """rollgym's pipeline with its exporter child; False: it did not start (the caller
    exports the same records in this process instead)."""
    try:
        provider, shipper = pipeline.build_process_pipeline(
            settings,
            resource,
            make_sampler(settings.sampler, settings.sampler_arg),
            _id_generator(settings, run_id),
            store_token,
        )
    except Exception as exc:
        _log.warning(
            "span exporter process did not start (%s: %s); exporting from this process",
            type(exc).__name__,
            exc,
        )
        return False
    _install_tracer_provider(provider)
    handle.tracer_provider = provider
    handle.processor = shipper
    return True


_global_meter_set = False


def _install_meter_provider(provider: MeterProvider) -> None:
    """Make the first meter provider of this process global (the API allows it once)."""
    global _global_meter_set
    if not _global_meter_set:
        _global_meter_set = True
        metrics_api.set_meter_provider(provider)


def _resource(
    service_name: str,
    run_id: str,
    server_name: str | None,
    server_kind: str | None,
    server_instance: str | None = None,
) -> Resource:
    """Run and server identity on every span and point; ``OTEL_SERVICE_NAME`` wins for the name.

    A server's replica sets ``service.instance.id``: replicas share everything else, and two
    processes exporting the same metric under one identity would overwrite each other.
    """
    attributes: dict[str, str] = {names.RUN_ID: run_id}
    if server_instance:
        attributes[SERVICE_INSTANCE_ID] = f"{run_id}:{server_instance}"
    if server_name:
        attributes[names.SERVER_NAME] = server_name
    if server_kind:
        attributes[names.SERVER_KIND] = server_kind
    user_named = os.environ.get(env.OTEL_SERVICE_NAME) or "service.name=" in os.environ.get(
        env.OTEL_RESOURCE_ATTRIBUTES, ""
    )
    if not user_named:
        attributes[SERVICE_NAME] = service_name
    resource = Resource.create(attributes)
    # OTEL_RESOURCE_ATTRIBUTES may hold a URL with user:password: never exported as given
    return Resource(
        {k: redact_text(v) if isinstance(v, str) else v for k, v in resource.attributes.items()},
        resource.schema_url,
    )


def _safe(
    build: Callable[[TelemetrySettings, str | None], _T | None],
    settings: TelemetrySettings,
    store_token: str | None,
) -> _T | None:
    """An exporter that cannot be built (missing package, bad URL) means no export, logged."""
    try:
        return build(settings, store_token)
    except Exception as exc:
        _log.warning(
            "telemetry exporter not available (%s: %s); exporting nothing", type(exc).__name__, exc
        )
        return None


def _report_loss(counts: SpanCountRecord) -> None:
    """Say loudly, once per process at its end, which spans did not surely reach the backend,
    and what would help (:mod:`rollgym.telemetry.loss_report`)."""
    for warning in loss_warnings(counts):
        _log.warning("%s", warning)


class _OncePerMessage(logging.Filter):
    """Let each distinct log message template through once: failures are logged, not repeated."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, object]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def _quiet_exporter_logs() -> None:
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OncePerMessage) for f in logger.filters):
            logger.addFilter(_OncePerMessage())
