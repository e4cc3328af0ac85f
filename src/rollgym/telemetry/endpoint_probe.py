"""Is the OTLP endpoint there at all? One TCP connect at the start of a run, a few seconds at most.

Without it, a dead or mistyped endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1``)
was found out batch by batch: every process (the driver and each server) retried each batch
with backoff for ``telemetry.flush_timeout_s`` before giving up, so a 2-row run took minutes
and then advised raising the very limit that made it slow. The probe only asks whether
anything accepts a connection at the endpoint's host and port: a backend that is up but slow
is the exporter's business (smaller batches after a timeout; see
:mod:`rollgym.telemetry.pipeline.child`), not the probe's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

import rollgym.environment_variables as env
from rollgym.telemetry.settings import TelemetrySettings

#: The whole probe's limit: DNS plus one connect per address.
PROBE_TIMEOUT_S = 3.0
_DEFAULT_PORTS = {"http/protobuf": 4318, "grpc": 4317}


def traces_endpoint(settings: TelemetrySettings, environ: Mapping[str, str] | None = None) -> str:
    """The URL the trace exporter will post to (the SDK's precedence, its default last)."""
    environ = os.environ if environ is None else environ
    default = f"http://localhost:{_DEFAULT_PORTS[settings.protocol]}"
    return environ.get(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or settings.endpoint or default


def unreachable(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing accepts a connection at ``url``'s host and port, or None when something does."""
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return f"not a URL: {exc}"
    if not host:
        return "no host in the URL"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return "connection refused: nothing listens there"
    except TimeoutError:
        return f"no answer to a connection within {timeout_s:.0f} s"
    except socket.gaierror as exc:
        return f"the host does not resolve ({exc.strerror or exc})"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def needs_probe(settings: TelemetrySettings) -> bool:
    """Only an OTLP destination the user chose: the run's own trace store is started here."""
    exporting = settings.traces_exporter == "otlp" or settings.metrics_exporter == "otlp"
    return exporting and not settings.to_local_store
