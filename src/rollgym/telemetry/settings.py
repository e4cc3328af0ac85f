"""Resolved telemetry settings: the config block plus the ``OTEL_*`` environment, decided once.

Resolution happens exactly once per run, in the driver (:meth:`TelemetrySettings.from_config`);
launched servers receive the result through :func:`server_env` and read it back with
:meth:`TelemetrySettings.from_env`, so every process of a run exports to the same place with
the same groups. A standard ``OTEL_*`` variable set by the user always wins over the config.

Secrets never enter a settings object: OTLP headers stay in the environment variable that holds
them (``OTEL_EXPORTER_OTLP_HEADERS`` or the config's ``headers_env``) and are read only when the
exporter is built.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import rollgym.environment_variables as env
from rollgym.defaults import (
    SPAN_EXPORT_BATCH_SIZE,
    SPAN_FLUSH_TIMEOUT_S,
    SPAN_QUEUE_SIZE,
    SPAN_SCHEDULE_DELAY_MS,
)
from rollgym.telemetry.content_capture import CAPTURE_MAX_BYTES
from rollgym.telemetry.groups import SpanGroup, resolve_groups
from rollgym.telemetry.pipeline.frames import METRICS_PATH, TRACES_PATH

if TYPE_CHECKING:
    from rollgym.telemetry.config_block import TelemetryConfig

_log = logging.getLogger(__name__)

ExporterKind = Literal["otlp", "console", "none"]
Protocol = Literal["http/protobuf", "grpc"]
_EXPORTERS: tuple[str, ...] = ("otlp", "console", "none")
_PROTOCOLS: tuple[str, ...] = ("http/protobuf", "grpc")
_SIGNAL_PATHS: tuple[str, ...] = (TRACES_PATH, METRICS_PATH)
#: Bounded per-request export timeout, so a dead endpoint costs the background thread seconds.
DEFAULT_EXPORT_TIMEOUT_S = 10.0
#: How long each process waits at its end for queued spans to reach the backend: generous, so
#: a backend that is merely slow to start (a fresh MLflow tracking server) loses nothing.
DEFAULT_FLUSH_TIMEOUT_S = SPAN_FLUSH_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Everything a process needs to set telemetry up; no secrets, JSON-serialisable."""

    groups: frozenset[SpanGroup] = field(default_factory=frozenset)
    traces_exporter: ExporterKind = "none"
    metrics_exporter: ExporterKind = "none"
    #: OTLP base URL (HTTP: ``/v1/traces`` is appended); None lets the SDK use its default.
    endpoint: str | None = None
    protocol: Protocol = "http/protobuf"
    #: True when traces go to the run's local trace store (which takes traces only).
    to_local_store: bool = False
    #: Name of the env var holding OTLP headers (``k=v,...``); the value is read at export setup.
    headers_env: str | None = None
    sampler: str | None = None
    sampler_arg: str | None = None
    single_trace: bool = False
    max_queue_size: int = SPAN_QUEUE_SIZE
    max_export_batch_size: int = SPAN_EXPORT_BATCH_SIZE
    schedule_delay_ms: int = SPAN_SCHEDULE_DELAY_MS
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S
    run_id: str | None = None
    #: Spans carry content (tool arguments and results), each value cut to the byte limit.
    capture_content: bool = False
    capture_max_bytes: int = CAPTURE_MAX_BYTES

    @property
    def tracing(self) -> bool:
        """A trace exporter will be installed (the gate's ``tracing`` flag)."""
        return self.traces_exporter != "none"

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls,
        config: TelemetryConfig,
        output_dir: Any = None,
        *,
        local_store_endpoint: str | None = None,
        run_id: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> TelemetrySettings:
        """Resolve a ``TelemetryConfig`` against the environment (``OTEL_*`` wins).

        ``local_store_endpoint`` is the run's trace store base URL; it is used only when the
        config says ``exporter: auto`` and no ``OTEL_*`` variable chooses a destination.
        ``output_dir`` is accepted for call-site symmetry and not needed here.
        """
        del output_dir
        environ = os.environ if environ is None else environ
        if _truthy(environ.get(env.OTEL_SDK_DISABLED)):
            return cls(
                groups=resolve_groups(config.preset),
                flush_timeout_s=config.flush_timeout_s,
                run_id=run_id,
            )

        explicit_endpoint = environ.get(env.OTEL_EXPORTER_OTLP_ENDPOINT) or config.endpoint
        # A per-signal URL is read by the SDK exporter itself; it still means "a destination".
        signal_endpoint = bool(environ.get(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT))
        env_traces = _exporter_from_env(environ.get(env.OTEL_TRACES_EXPORTER))
        to_local_store = False
        if env_traces is not None:
            traces: ExporterKind = env_traces
        elif config.exporter != "auto":
            traces = config.exporter
        elif explicit_endpoint or signal_endpoint:
            traces = "otlp"
        elif local_store_endpoint:
            traces, to_local_store = "otlp", True
        else:
            traces = "none"

        env_metrics = _exporter_from_env(environ.get(env.OTEL_METRICS_EXPORTER))
        if env_metrics is not None:
            metrics: ExporterKind = env_metrics
        elif not config.metrics or to_local_store:
            # The local trace store accepts traces only; metrics need an explicit destination.
            metrics = "none"
        else:
            metrics = traces

        protocol = (
            environ.get(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
            or environ.get(env.OTEL_EXPORTER_OTLP_PROTOCOL)
            or config.protocol
        )
        if protocol not in _PROTOCOLS:
            _log.warning("unsupported OTLP protocol %r; using http/protobuf", protocol)
            protocol = "http/protobuf"
        if to_local_store:
            protocol = "http/protobuf"  # the store speaks OTLP/HTTP only

        return cls(
            groups=resolve_groups(config.preset),
            traces_exporter=traces,
            metrics_exporter=metrics,
            endpoint=(
                _otlp_base(explicit_endpoint, protocol) or local_store_endpoint
                if traces == "otlp"
                else None
            ),
            protocol=protocol,  # type: ignore[arg-type]
            to_local_store=to_local_store,
            headers_env=config.headers_env,
            sampler=environ.get(env.OTEL_TRACES_SAMPLER) or config.sampler,
            sampler_arg=environ.get(env.OTEL_TRACES_SAMPLER_ARG) or config.sampler_arg,
            single_trace=config.single_trace,
            max_queue_size=config.max_queue_size,
            max_export_batch_size=min(config.max_export_batch_size, config.max_queue_size),
            schedule_delay_ms=config.schedule_delay_ms,
            export_timeout_s=export_timeout_s(environ),
            flush_timeout_s=config.flush_timeout_s,
            run_id=run_id,
            capture_content=_capture_content(config, environ),
            capture_max_bytes=config.capture_max_bytes,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetrySettings:
        """What a launched server uses: the driver's ``_ROLLGYM_TELEMETRY``, else plain ``OTEL_*``."""
        environ = os.environ if environ is None else environ
        raw = environ.get(env.ROLLGYM_TELEMETRY)
        if raw:
            try:
                return cls.from_json(raw)
            except (ValueError, TypeError) as exc:
                _log.warning("ignoring malformed %s: %s", env.ROLLGYM_TELEMETRY, exc)
        from rollgym.telemetry.config_block import TelemetryConfig

        return cls.from_config(TelemetryConfig.model_validate({}), environ=environ)

    @staticmethod
    def needs_local_store(
        config: TelemetryConfig, environ: Mapping[str, str] | None = None
    ) -> bool:
        """Whether the run must start its local trace store (nothing else chooses a destination)."""
        settings = TelemetrySettings.from_config(
            config, local_store_endpoint="http://local-store.invalid", environ=environ
        )
        return settings.to_local_store

    # --- serialisation -------------------------------------------------------------------------
    def to_json(self) -> str:
        data = asdict(self)
        data["groups"] = sorted(g.value for g in self.groups)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> TelemetrySettings:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in data.items() if k in known}
        data["groups"] = resolve_groups(data.get("groups", []))
        for key in ("traces_exporter", "metrics_exporter"):
            if data.get(key, "none") not in _EXPORTERS:
                raise ValueError(f"{key}: unknown exporter {data[key]!r}")
        return cls(**data)


def server_env(settings: TelemetrySettings) -> dict[str, str]:
    """Env vars a launched server needs, to be merged OVER the driver's own ``os.environ``.

    Holds ``_ROLLGYM_TELEMETRY`` (the resolved settings as JSON) and the resolved ``OTEL_*``
    destination, so servers (and any OpenTelemetry library inside them) export where the driver
    does. Header secrets are not copied: the server inherits the variable that holds them.
    """
    out = {env.ROLLGYM_TELEMETRY: settings.to_json()}
    if not settings.tracing and settings.metrics_exporter == "none":
        out[env.OTEL_TRACES_EXPORTER] = "none"
        out[env.OTEL_METRICS_EXPORTER] = "none"
        return out
    out[env.OTEL_TRACES_EXPORTER] = settings.traces_exporter
    out[env.OTEL_METRICS_EXPORTER] = settings.metrics_exporter
    if settings.endpoint:
        out[env.OTEL_EXPORTER_OTLP_ENDPOINT] = settings.endpoint
    out[env.OTEL_EXPORTER_OTLP_PROTOCOL] = settings.protocol
    if settings.sampler:
        out[env.OTEL_TRACES_SAMPLER] = settings.sampler
    if settings.sampler_arg:
        out[env.OTEL_TRACES_SAMPLER_ARG] = settings.sampler_arg
    return out


def _exporter_from_env(value: str | None) -> ExporterKind | None:
    """First entry of an ``OTEL_*_EXPORTER`` list; unsupported names become ``none`` (logged)."""
    if not value or not value.strip():
        return None
    first = value.split(",")[0].strip().lower()
    if first not in _EXPORTERS:
        _log.warning("unsupported exporter %r; rollgym supports otlp, console, none", first)
        return "none"
    return first  # type: ignore[return-value]


def _capture_content(config: TelemetryConfig, environ: Mapping[str, str]) -> bool:
    """The standard GenAI capture variable when set (either way), else the config's choice."""
    raw = environ.get(env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)
    if raw is None or not raw.strip():
        return config.capture_content
    return _truthy(raw)


def _otlp_base(endpoint: str | None, protocol: str) -> str | None:
    """The OTLP/HTTP base URL of ``endpoint``, which a user often gives as the full trace URL.

    ``telemetry.endpoint`` and ``OTEL_EXPORTER_OTLP_ENDPOINT`` are base URLs: the signal's
    path is added to them (``/v1/traces``, ``/v1/metrics``). Backends document the full URL
    (Phoenix's ``http://localhost:6006/v1/traces``), and taken as a base it would become
    ``.../v1/traces/v1/traces``, which no backend serves: every span refused, said only at
    the end. A trailing signal path is therefore taken off; the per-signal variables
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) stay full URLs, used as they are.
    """
    if not endpoint or protocol == "grpc":
        return endpoint
    base = endpoint.rstrip("/")
    for path in _SIGNAL_PATHS:
        if base.endswith(path):
            return base[: -len(path)]
    return endpoint


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def export_timeout_s(environ: Mapping[str, str]) -> float:
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` in seconds; the variable itself is in milliseconds.

    The OpenTelemetry specification gives every ``*_TIMEOUT`` variable in milliseconds
    (``10000`` is the default 10 s). The Python SDK's own exporters read it as seconds, which is
    why rollgym always hands its exporters an explicit timeout instead of letting the SDK read
    the variable. A value that is not a positive number is ignored with one warning.
    """
    raw = environ.get(env.OTEL_EXPORTER_OTLP_TIMEOUT)
    if not raw or not raw.strip():
        return DEFAULT_EXPORT_TIMEOUT_S
    try:
        millis = float(raw)
    except ValueError:
        millis = -1.0
    if not math.isfinite(millis) or millis <= 0:
        _log.warning(
            "ignoring %s=%r: expected a positive number of milliseconds; using %g s",
            env.OTEL_EXPORTER_OTLP_TIMEOUT,
            raw,
            DEFAULT_EXPORT_TIMEOUT_S,
        )
        return DEFAULT_EXPORT_TIMEOUT_S
    return millis / 1000.0
