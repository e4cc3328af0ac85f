"""Every environment variable telemetry reads or writes, as documented constants.

The standard ``OTEL_*`` variables mean what they mean in any OpenTelemetry program and win
over the ``telemetry:`` config block; ``ROLLGYM_TELEMETRY`` is how the driver hands its resolved
settings to the servers it launches (see :func:`rollgym.telemetry.setup.server_env`). Keeping
the names here means the resolver, the server hand-off and the docs cannot drift apart.
"""

from __future__ import annotations

from typing import Final

#: JSON of the resolved non-secret settings a launched server needs (preset, queue, run id).
ROLLGYM_TELEMETRY: Final = "ROLLGYM_TELEMETRY"

#: Bearer token of the run's local trace store when it listens beyond loopback; handed to the
#: servers the run launches (in their environment only, never in a file or a log line).
ROLLGYM_TRACE_STORE_TOKEN: Final = "ROLLGYM_TRACE_STORE_TOKEN"

#: ``true`` switches the SDK off entirely: no providers, every gate closed.
OTEL_SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
#: ``otlp`` | ``console`` | ``none`` (first entry of a comma list is used).
OTEL_TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
#: ``otlp`` | ``console`` | ``none``.
OTEL_METRICS_EXPORTER: Final = "OTEL_METRICS_EXPORTER"
#: Base URL; the HTTP exporter appends ``/v1/traces`` and ``/v1/metrics``.
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Full per-signal URLs; read by the SDK exporters themselves.
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
#: ``http/protobuf`` (default) or ``grpc``.
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
#: ``k=v,k2=v2``; may hold an API key, so it is never logged or written to a file.
OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_EXPORTER_OTLP_TRACES_HEADERS: Final = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
#: ``gzip`` or ``none``.
OTEL_EXPORTER_OTLP_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_COMPRESSION"
OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
#: Seconds per export request (the SDK reads it; we default to a bounded value).
OTEL_EXPORTER_OTLP_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
OTEL_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
#: Standard sampler names (``parentbased_traceidratio`` ...) and their argument.
OTEL_TRACES_SAMPLER: Final = "OTEL_TRACES_SAMPLER"
OTEL_TRACES_SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
#: ``true``: spans carry content (tool arguments and results), as OpenTelemetry's GenAI
#: instrumentations read it.
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: Final = (
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
)
