"""The driver's side of telemetry for one job: local trace store, SDK setup, flush, counts.

Kept apart from :mod:`rollgym.driver.job` so the job reads as the data path. The order is
fixed by what depends on what: the trace store starts first (servers and the driver export to
it), telemetry is flushed after the servers stopped, and the store stops last so it receives
everything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollgym.config import JobConfig, TelemetryConfig
from rollgym.errors import ConfigError, UnusableStoreFile
from rollgym.event_loop import cancel_and_wait
from rollgym.placement.supervisor import report_to_stderr
from rollgym.telemetry.span_counts import SpanCountRecord, empty_record
from rollgym.urls import redact_url

if TYPE_CHECKING:  # telemetry and the store load only when a run uses them
    from rollgym.telemetry.metrics import HttpClientMetrics, RolloutMetrics
    from rollgym.telemetry.settings import TelemetrySettings
    from rollgym.telemetry.setup import TelemetryHandle
    from rollgym.tracestore.store_process import TraceStoreProcess
    from rollgym.tracestore.tail_forward import Sender
    from rollgym.tracestore.tail_stream import TailStream

_log = logging.getLogger(__name__)

#: How often the driver checks that its trace store is alive.
STORE_POLL_S = 0.5
#: Restarts of the run's trace store before the run goes on without one.
STORE_RESTARTS = 3
#: The longest the first rollout waits for the run's trace store to commit at once.
STORE_READY_S = 30.0


class JobTelemetry:
    """Owns the trace store process and the driver's telemetry handle for one run."""

    def __init__(self) -> None:
        self.store: TraceStoreProcess | None = None
        self.handle: TelemetryHandle | None = None
        self.server_env: dict[str, str] = {}
        #: Bearer token of the local store when it listens beyond loopback (never written out).
        self.store_token: str | None = None
        #: The store's deaths and restarts, and the seconds it was down (summary.json).
        self.store_deaths = 0
        self.store_restarts = 0
        self.store_down_s = 0.0
        #: Why the run has no trace store of its own (None: it has one, or needs none).
        self.store_not_started: str | None = None
        self._store_args: tuple[Path, Path] | None = None
        self._store_options: dict[str, Any] = {}
        self._watch: asyncio.Task[None] | None = None
        #: The chosen OTLP endpoint (redacted) when nothing answered there at the start.
        self.unreachable_endpoint: str | None = None
        #: Tail sampling with an OTLP endpoint: where the kept traces go from the store.
        self._forward: TelemetrySettings | None = None
        #: When this session began (its spans are those that started since).
        self._session_started_ns = time.time_ns()
        #: Tail sampling: sends kept traces on and removes dropped ones while the run goes.
        self._tail_stream: TailStream | None = None

    @property
    def metrics(self) -> RolloutMetrics | None:
        return getattr(self.handle, "metrics", None)

    @property
    def http_metrics(self) -> HttpClientMetrics | None:
        return getattr(self.handle, "http_metrics", None)

    def start(self, config: JobConfig, output_dir: Path, run_id: str) -> None:
        """Start the store when nothing else receives traces; set telemetry up in the driver."""
        try:
            from rollgym.telemetry.settings import TelemetrySettings, server_env
        except ImportError as exc:  # telemetry not installed in this build: run without it
            _log.warning("telemetry unavailable (%s); running with exporter none", exc)
            return
        endpoint = None
        forward = self._forward_target(config.telemetry, output_dir, run_id)
        if forward is not None or TelemetrySettings.needs_local_store(config.telemetry):
            self._session_started_ns = time.time_ns()
            endpoint = self._start_store(output_dir, config.telemetry.store_address())
        try:  # the SDK's imports after the store's start, so the store starts beside them
            from rollgym.telemetry.setup import setup_telemetry
        except ImportError as exc:
            _log.warning("telemetry unavailable (%s); running with exporter none", exc)
            return
        settings = TelemetrySettings.from_config(
            config.telemetry, output_dir, local_store_endpoint=endpoint, run_id=run_id
        )
        if forward is not None and endpoint is not None:
            import rollgym.environment_variables as env_vars

            # spans wait in the store for the decision, then go on to the endpoint (kept ones)
            self._probe(forward, config.telemetry.require_exporter)
            self._forward = forward
            settings = dataclasses.replace(
                settings,
                endpoint=endpoint,
                protocol="http/protobuf",
                to_local_store=True,
                headers_env=None,
                # the store keeps no metrics: only a metrics endpoint of their own takes them
                metrics_exporter=(
                    settings.metrics_exporter
                    if os.environ.get(env_vars.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)
                    else "none"
                ),
            )
        settings = self._probe(settings, config.telemetry.require_exporter)
        # ``embedded``: inside a trainer with its own recording provider, trace into that one
        self.handle = setup_telemetry(
            settings,
            service_name="rollgym-driver",
            run_id=run_id,
            embedded=True,
            store_token=self.store_token,
        )
        self.server_env = server_env(settings)
        self._start_tail_sampling(config.telemetry, settings.to_local_store and settings.tracing)
        if self.store_token is not None:
            from rollgym.environment_variables import ROLLGYM_TRACE_STORE_TOKEN

            self.server_env[ROLLGYM_TRACE_STORE_TOKEN] = self.store_token

    def _probe(self, settings: TelemetrySettings, required: bool) -> TelemetrySettings:
        """One connect to a chosen OTLP endpoint: when nothing is there, say so in one line and
        go on (the spans wait for a backend that is merely slow to start; each process checks
        again at its end and, when nothing listens still, stops waiting at once: seconds, not
        the flush limit), or stop the run before any server starts when
        ``telemetry.require_exporter`` asks for that."""
        from rollgym.telemetry.endpoint_probe import (
            needs_probe,
            traces_endpoint,
            unreachable,
        )
        from rollgym.telemetry.setup import quiet_retries_to_unreachable_endpoint

        if not needs_probe(settings):
            return settings
        target = redact_url(traces_endpoint(settings))
        problem = unreachable(traces_endpoint(settings))
        if problem is None:
            return settings
        if required:
            raise ConfigError(
                f"the OTLP endpoint {target} is unreachable ({problem}); the run did not start",
                key_path="telemetry.require_exporter",
            )
        self.unreachable_endpoint = target
        quiet_retries_to_unreachable_endpoint()
        report_to_stderr(
            f"rollgym: telemetry: the OTLP endpoint {target} is unreachable ({problem}); the "
            "run goes on, and its spans wait for the endpoint until the run ends "
            "(telemetry.require_exporter: true stops the run instead)"
        )
        return settings

    def _start_store(self, output_dir: Path, address: tuple[str, int]) -> str | None:
        try:
            from rollgym.tracestore.access import store_token
            from rollgym.tracestore.store_process import start_trace_store

            host, port = address
            self.store_token = store_token(host)
            self._store_args = (output_dir / "traces.db", output_dir / "logs" / "tracestore.log")
            # run_dir: the store's viewer shows this run's progress.json while it goes
            self._store_options = {
                "host": host,
                "token": self.store_token,
                "run_dir": output_dir,
            }
            # not waited for: the servers start beside it (their exporters retry until it is up)
            self.store = start_trace_store(
                *self._store_args, port=port, wait=False, **self._store_options
            )
        except Exception as exc:  # noqa: BLE001 - telemetry never decides whether a run runs
            unusable = isinstance(exc, UnusableStoreFile)
            self._go_on_without_store(str(exc), output_dir / "traces.db" if unusable else None)
            self.store_token = None
            return None
        if self.store_token is not None:
            _announce_remote_store(host, self.store.endpoint, self.store_token)
        else:
            print(
                f"rollgym: live profile: {self.store.endpoint}/#/profile (afterwards: "
                f"rollgym traces serve --run-dir {output_dir} --port 0)",
                file=sys.stderr,
                flush=True,
            )
        return str(self.store.endpoint)

    async def wait_for_store(self) -> None:
        """Return once the run's store commits at once (call it before the first rollout).

        The store starts beside the servers and is not waited for to start them; but a rollout
        that ends before the store serves leaves its spans queued in its processes, and a
        ``kill -9`` of the driver then takes them all (the store and the servers die with it).
        Waiting here makes a completed rollout's spans committed within about a second of its
        end. Bounded: a store that is not ready in :data:`STORE_READY_S` is said in one line
        and the run goes on (telemetry never decides whether a rollout runs)."""
        store = self.store
        if store is None or await store.ready(STORE_READY_S):
            return
        if store.process.poll() is None:
            report_to_stderr(
                f"rollgym: the trace store was not ready after {STORE_READY_S:g} s; the "
                "rollouts start anyway (their spans wait in their processes until it is)"
            )

    def note_rollouts_ended(self) -> None:
        """Every rollout is over (servers stop next): see
        :meth:`~rollgym.telemetry.setup.TelemetryHandle.note_rollouts_ended`."""
        if self.handle is not None:
            self.handle.note_rollouts_ended()

    def flush(self) -> SpanCountRecord:
        """Flush and shut the driver's exporters down; return its span counts."""
        if self.handle is None:
            return empty_record()
        self.handle.shutdown()
        try:
            counts: SpanCountRecord = self.handle.counts()
            return counts
        except Exception:  # noqa: BLE001
            return empty_record()

    def watch_store(self) -> None:
        """Watch the run's store; restart it on its port when it dies (bounded). Call it in
        the run's event loop, outside any span."""
        if self.store is not None and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_store())

    async def _watch_store(self) -> None:
        """Spans sent while the store is down are dropped by their exporters (and counted
        there); this only brings it back and measures the gap."""
        while self.store is not None:
            await asyncio.sleep(STORE_POLL_S)
            process = self.store.process
            if process.poll() is None:
                continue
            refused = self.store.refusal()
            if refused is not None:  # its file is unusable: a restart would meet it again
                self._go_on_without_store(refused, self.store.db_path)
                self.store = None
                return
            self.store_deaths += 1
            died = time.monotonic()
            port = int(self.store.endpoint.rsplit(":", 1)[1])
            report_to_stderr(
                f"rollgym: the trace store died (exit status {process.returncode}); spans "
                "sent until it is back are dropped and counted"
            )
            if self.store_restarts >= STORE_RESTARTS or self._store_args is None:
                report_to_stderr(
                    f"rollgym: the trace store was restarted {STORE_RESTARTS} times; not again"
                )
                self.store = None
                return
            self.store_restarts += 1
            try:
                from rollgym.tracestore.store_process import start_trace_store

                self.store = await asyncio.to_thread(
                    start_trace_store, *self._store_args, port=port, **self._store_options
                )
            except Exception as exc:  # noqa: BLE001 - telemetry never decides whether a run runs
                report_to_stderr(
                    f"rollgym: the trace store did not restart ({exc}); going on without it"
                )
                self.store = None
                return
            finally:
                self.store_down_s += time.monotonic() - died
            report_to_stderr(f"rollgym: the trace store is back at {self.store.endpoint}")

    def _go_on_without_store(self, problem: str, unusable_file: Path | None) -> None:
        """Say, once, that the run's store did not start and why; the run goes on (telemetry
        never decides whether a rollout runs). ``unusable_file``: the store file it refused."""
        advice = (
            f" (move the file aside, e.g. mv {unusable_file} {unusable_file}.bad, and a resume "
            "stores the spans of what it runs)"
            if unusable_file is not None
            else ""
        )
        self.store_not_started = f"{problem}; the run goes on without storing its spans{advice}"
        report_to_stderr(
            f"rollgym: telemetry: the run's trace store did not start: {self.store_not_started}"
        )

    def store_counts(self) -> dict[str, object]:
        """The store's availability for ``summary.json`` -> ``telemetry``."""
        counts: dict[str, object] = {
            "store_deaths": self.store_deaths,
            "store_restarts": self.store_restarts,
            "store_down_s": round(self.store_down_s, 3),
        }
        if self.store_not_started is not None:
            counts["store_not_started"] = self.store_not_started
        if self.unreachable_endpoint is not None:
            counts["exporter_unreachable"] = self.unreachable_endpoint
        return counts

    def _forward_target(
        self, config: TelemetryConfig, output_dir: Path, run_id: str
    ) -> TelemetrySettings | None:
        """With tail sampling and traces going to an OTLP endpoint: the settings of that
        endpoint, where the kept traces are sent from the run's store at its end. None
        otherwise, and where the endpoint is given only per signal
        (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, which every process would read itself)."""
        if config.tail_sampling is None:
            return None
        from rollgym.environment_variables import OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
        from rollgym.telemetry.settings import TelemetrySettings

        if os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT):
            return None
        target = TelemetrySettings.from_config(config, output_dir, run_id=run_id)
        if target.traces_exporter != "otlp" or target.to_local_store or not target.endpoint:
            return None
        return target

    def _start_tail_sampling(self, config: TelemetryConfig, to_local_store: bool) -> None:
        """Put the run's tail sampler where the dispatcher finds it (``telemetry.tail_sampling``).

        The store is where a rollout's spans from every process wait for the decision (with
        an OTLP endpoint too, :meth:`_forward_target`), so without it (the console exporter,
        an endpoint given per signal only, a store that did not start) nothing is sampled at
        the tail: said in one line, every trace kept.
        """
        block = config.tail_sampling
        if block is None:
            return
        if not to_local_store or self._store_args is None:
            report_to_stderr(
                "rollgym: telemetry: tail_sampling needs the run's local trace store (traces go "
                "to the console, or to an endpoint set per signal only); every trace is kept"
            )
            return
        from rollgym.telemetry.sampling_tail import TailPolicy, TailSampler, active, grace_after
        from rollgym.tracestore.tail_stream import TailStream

        sampler = TailSampler(
            TailPolicy(
                share=block.share,
                slow_percentile=block.slow_percentile,
                reward_band=block.reward_band,
                window=block.window,
            ),
            queue_decisions=True,
        )
        grace = (
            block.grace_s if block.grace_s is not None else grace_after(config.schedule_delay_ms)
        )
        self._tail_stream = TailStream(
            self._store_args[0],
            sampler,
            grace_s=grace,
            since_ns=self._session_started_ns,
            sender=self._forward_sender(),
        )
        active.sampler = sampler
        self._tail_stream.start()

    def _forward_sender(self) -> Sender | None:
        """With an OTLP endpoint (:meth:`_forward_target`): the sender of the kept traces."""
        if self._forward is None:
            return None
        from rollgym.telemetry.exporters import build_span_exporter
        from rollgym.tracestore.tail_forward import Sender

        exporter = build_span_exporter(self._forward)
        return Sender(exporter) if exporter is not None else None

    def finish_tail_sampling(self) -> dict[str, object] | None:
        """After every process flushed into the store: the tail stream's end pass (every
        dropped trace removed, what is left of the kept ones sent on), and what was decided
        (``summary.json`` -> ``telemetry.tail_sampling``).

        Called once the driver's own spans are delivered; a store that cannot be changed
        keeps every trace, and says so in the counts (telemetry never fails a run).
        """
        from rollgym.telemetry.sampling_tail import active

        sampler, active.sampler = active.sampler, None
        stream, self._tail_stream = self._tail_stream, None
        if sampler is None:
            return None
        counts = sampler.counts()
        if stream is None or self._store_args is None:
            return counts
        from rollgym.tracestore.tail_drop import dropped_in_rows

        try:
            stream.finish(sampler.dropped_traces, dropped_in_rows(self._store_args[0].parent))
        finally:
            if stream.sender is not None:
                _shutdown(stream.sender.exporter)
        counts["grace_s"] = stream.grace_s
        removed = stream.removed
        counts["spans_removed"] = removed.spans
        counts["traces_removed"] = removed.traces
        counts["spans_removed_before_end"] = removed.spans_before_end
        if removed.earlier_traces:  # a session killed before its end left them
            counts["earlier_sessions_traces_removed"] = removed.earlier_traces
            counts["earlier_sessions_spans_removed"] = removed.earlier_spans
        if stream.round_errors:  # what they had was left to the next round or the end
            counts["rounds_failed"] = stream.round_errors
        if stream.end_error is not None:
            counts["error"] = f"the end of the run's tail sampling failed: {stream.end_error}"
            report_to_stderr(f"rollgym: telemetry: tail sampling: {counts['error']}")
        sent = stream.forwarded
        if sent is not None and self._forward is not None:
            from rollgym.urls import redact_url

            target = redact_url(str(self._forward.endpoint))
            if sent.spans_failed:
                report_to_stderr(
                    f"rollgym: telemetry: tail sampling: {sent.spans_failed} kept span(s) were "
                    f"not accepted by {target}"
                )
            counts.update(
                {
                    "forwarded_to": target,
                    "spans_forwarded": sent.spans_sent,
                    "spans_forward_failed": sent.spans_failed,
                    "spans_forwarded_late": sent.spans_late,
                }
            )
        return counts

    async def stop_store(self) -> None:
        from rollgym.telemetry.sampling_tail import active

        active.sampler = None  # never outlives its run
        stream, self._tail_stream = self._tail_stream, None
        if stream is not None:  # the run ended before its end pass: the next session's cleans up
            await asyncio.to_thread(stream.stop)
            if stream.sender is not None:
                _shutdown(stream.sender.exporter)
        await cancel_and_wait(self._watch)
        self._watch = None
        if self.store is not None:
            stop = getattr(self.store, "astop", None)
            if stop is not None:
                await stop()
            else:
                self.store.stop()
            self.store = None


def _shutdown(exporter: object) -> None:
    """Shut an SDK exporter down (its connections), whatever it raises."""
    shutdown = getattr(exporter, "shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:  # noqa: BLE001 - telemetry never fails a run
            _log.debug("exporter shutdown failed", exc_info=True)


def _announce_remote_store(host: str, local_endpoint: str, token: str) -> None:
    """Tell the user how an engine on another machine exports into this run's store.

    A generated token is printed (the user must hand it to the engine); one the user set in
    ``ROLLGYM_TRACE_STORE_TOKEN`` is named, not repeated.
    """
    from rollgym.telemetry.pipeline.frames import TRACES_PATH
    from rollgym.tracestore.access import TOKEN_ENV, otel_headers_value

    port = local_endpoint.rsplit(":", 1)[1]
    reach = "<this machine's address>" if host in ("0.0.0.0", "::") else host
    given = os.environ.get(TOKEN_ENV) == token
    headers = f"authorization=Bearer%20${TOKEN_ENV}" if given else otel_headers_value(token)
    print(
        f"rollgym: the trace store listens on {host}:{port} and requires a bearer token. An "
        f"engine elsewhere exports into it with: vllm serve ... --otlp-traces-endpoint "
        f"http://{reach}:{port}{TRACES_PATH} and the environment "
        f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf "
        f"OTEL_EXPORTER_OTLP_TRACES_HEADERS={headers}",
        file=sys.stderr,
        flush=True,
    )
