"""The driver's side of telemetry for one job: local trace store, SDK setup, flush, counts.

Kept apart from :mod:`rollgym.driver.job` so the job reads as the data path. The order is
fixed by what depends on what: the trace store starts first (servers and the driver export to
it), telemetry is flushed after the servers stopped, and the store stops last so it receives
everything.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rollgym.config import JobConfig

_log = logging.getLogger(__name__)


class JobTelemetry:
    """Owns the trace store process and the driver's telemetry handle for one run."""

    def __init__(self) -> None:
        self.store: Any = None
        self.handle: Any = None
        self.server_env: dict[str, str] = {}

    @property
    def metrics(self) -> Any:
        return getattr(self.handle, "metrics", None)

    @property
    def http_metrics(self) -> Any:
        return getattr(self.handle, "http_metrics", None)

    def start(self, config: JobConfig, output_dir: Path, run_id: str) -> None:
        """Start the store when nothing else receives traces; set telemetry up in the driver."""
        try:
            from rollgym.telemetry.settings import TelemetrySettings, server_env
            from rollgym.telemetry.setup import setup_telemetry
        except ImportError as exc:  # telemetry not installed in this build: run without it
            _log.warning("telemetry unavailable (%s); running with exporter none", exc)
            return
        endpoint = None
        if TelemetrySettings.needs_local_store(config.telemetry):
            endpoint = self._start_store(output_dir)
        settings = TelemetrySettings.from_config(
            config.telemetry, output_dir, local_store_endpoint=endpoint, run_id=run_id
        )
        self.handle = setup_telemetry(settings, service_name="rollgym-driver", run_id=run_id)
        self.server_env = server_env(settings)

    def _start_store(self, output_dir: Path) -> str | None:
        try:
            from rollgym.tracestore.launch import start_trace_store

            self.store = start_trace_store(
                output_dir / "traces.db", output_dir / "logs" / "tracestore.log"
            )
        except Exception as exc:  # noqa: BLE001 - telemetry never decides whether a run runs
            _log.warning("local trace store did not start (%s); traces are not exported", exc)
            return None
        return str(self.store.endpoint)

    def flush(self) -> dict[str, int]:
        """Flush and shut the driver's exporters down; return its span counts."""
        if self.handle is None:
            return {"spans_exported": 0, "spans_dropped": 0}
        self.handle.shutdown()
        try:
            return dict(self.handle.counts())
        except Exception:  # noqa: BLE001
            return {"spans_exported": 0, "spans_dropped": 0}

    async def stop_store(self) -> None:
        if self.store is not None:
            stop = getattr(self.store, "astop", None)
            if stop is not None:
                await stop()
            else:
                self.store.stop()
            self.store = None
