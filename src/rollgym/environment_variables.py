"""Every environment variable rollgym reads or writes, each a documented constant.

One module, so that the code, the docs and the tests cannot drift apart on a name, and so a
newcomer sees in one place what the environment can change. Three kinds:

- **Standard OpenTelemetry variables** (``OTEL_*``): they mean what they mean in any
  OpenTelemetry program and win over the ``telemetry:`` config block.
- **Settings a user may set** (``ROLLGYM_*``): the trace store's token, and switches back to a
  library path for comparing it with rollgym's own side by side (the benchmarks do).
- **Internal hand-offs** between rollgym's own processes (``_ROLLGYM_*``): the driver hands a
  launched server its spec and telemetry settings, the fork server its control socket, a
  sandbox its id. The leading underscore keeps them out of the user's namespace: nobody is
  meant to set them, and a user's ``ROLLGYM_*`` can never collide with one.
"""

from __future__ import annotations

from typing import Final

# --- standard OpenTelemetry variables -------------------------------------------------------

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

# --- settings a user may set ----------------------------------------------------------------

#: Bearer token of a local trace store; required beyond loopback, generated per run when unset.
#: Handed to the servers the run launches in their environment only, never in a file or a log.
ROLLGYM_TRACE_STORE_TOKEN: Final = "ROLLGYM_TRACE_STORE_TOKEN"
#: ``0`` spawns every child (servers, span exporters) in an interpreter of its own instead of
#: forking it from the fork server.
ROLLGYM_FORK_SERVER: Final = "ROLLGYM_FORK_SERVER"
#: ``1`` imports the pure-Python twins of the compiled modules (wire codecs, row decoders).
ROLLGYM_PURE_PYTHON: Final = "ROLLGYM_PURE_PYTHON"
#: ``1``: span exporters post OTLP to the run's own trace store instead of span records.
ROLLGYM_STORE_OTLP: Final = "ROLLGYM_STORE_OTLP"
#: ``aiohttp`` sends every outgoing exchange through aiohttp instead of the lean client.
ROLLGYM_HTTP_CLIENT: Final = "ROLLGYM_HTTP_CLIENT"
#: ``uvicorn``: servers keep uvicorn's own request cycle on httptools, not the lean one.
ROLLGYM_HTTP_SERVER: Final = "ROLLGYM_HTTP_SERVER"
#: ``h11``: servers parse HTTP with the pure-Python h11 instead of httptools.
ROLLGYM_HTTP_PARSER: Final = "ROLLGYM_HTTP_PARSER"
#: ``starlette`` routes every request through Starlette's router instead of the hot routes.
ROLLGYM_HOT_ROUTES: Final = "ROLLGYM_HOT_ROUTES"

# --- internal hand-offs between rollgym's processes (never set by a user) -------------------

#: JSON of the driver's resolved non-secret telemetry settings, for the servers it launches.
ROLLGYM_TELEMETRY: Final = "_ROLLGYM_TELEMETRY"
#: JSON of what a launched server process is to serve (``rollgym.servers.spec.ServeSpec``).
ROLLGYM_SERVER_SPEC: Final = "_ROLLGYM_SERVER_SPEC"
#: The fork server's inherited control socket, as a file descriptor number.
ROLLGYM_FORK_SERVER_FD: Final = "_ROLLGYM_FORK_SERVER_FD"
#: JSON ``[[impl, kind], ...]``: the server classes the fork server imports before its first
#: request.
ROLLGYM_FORK_SERVER_PRELOAD: Final = "_ROLLGYM_FORK_SERVER_PRELOAD"
#: The run's logs folder, in the fork server's environment (and so in its servers' ``/proc``):
#: it names the run a fork server belongs to.
ROLLGYM_FORK_SERVER_LOGS: Final = "_ROLLGYM_FORK_SERVER_LOGS"
#: Names a sandbox inside it: accounting finds its processes by it.
ROLLGYM_SANDBOX_ID: Final = "_ROLLGYM_SANDBOX_ID"
#: The same for one exec (``<sandbox id>.<n>``): the no-cgroup sweep kills stragglers by it.
ROLLGYM_SANDBOX_EXEC: Final = "_ROLLGYM_SANDBOX_EXEC"
