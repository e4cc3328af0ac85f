"""Loss is counted, export never blocks or fails the caller: slow, dead and erroring endpoints."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aiohttp_loopback import serve_on_loopback
from rollgym.telemetry import spans
from rollgym.telemetry.groups import PRESETS
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import TelemetryHandle, setup_telemetry


def _two(counts: dict) -> dict:
    """The delivered/dropped pair of a span-count record (it also has unknown and reasons)."""
    return {key: counts[key] for key in ("spans_exported", "spans_dropped")}


class _BlockingExporter(InMemorySpanExporter):
    """Holds every export until released: a stalled backend, deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(10)
        return super().export(spans)


def _settings(**kw: object) -> TelemetrySettings:
    base: dict[str, object] = {"groups": PRESETS["default"], "traces_exporter": "otlp"}
    return TelemetrySettings(**{**base, **kw})  # type: ignore[arg-type]


def _telemetry(exporter: InMemorySpanExporter | None = None, **settings: object) -> TelemetryHandle:
    """Telemetry of service ``t``, run ``r``, the default groups and ``settings``, exporting
    to ``exporter`` where given (else over OTLP to the settings' endpoint)."""
    return setup_telemetry(
        _settings(**settings), service_name="t", run_id="r", span_exporter=exporter
    )


def _end_spans(n: int) -> float:
    """End ``n`` spans; return the slowest single span's start+end time in seconds."""
    worst = 0.0
    for i in range(n):
        t0 = time.perf_counter()
        with spans.rollout_span(str(i)):
            pass
        worst = max(worst, time.perf_counter() - t0)
    return worst


def test_full_queue_drops_are_counted_exactly():
    exporter = _BlockingExporter()
    handle = _telemetry(
        exporter, max_queue_size=4, max_export_batch_size=4, schedule_delay_ms=60_000
    )
    _end_spans(4)  # a full batch wakes the worker, which takes it and stalls in export
    assert exporter.entered.wait(5)
    _end_spans(6)  # 4 fit in the queue, 2 are dropped
    assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 2}
    assert handle.dropped_by_reason()["queue_full"] == 2
    exporter.release.set()
    handle.shutdown()
    assert _two(handle.counts()) == {"spans_exported": 8, "spans_dropped": 2}
    assert len(exporter.get_finished_spans()) == 8


def test_slow_exporter_never_slows_the_caller_and_loss_is_counted():
    """2,000 spans end while the exporter is stuck in its first export: had ending a span
    waited on the exporter, the thread ending them would still be stuck when released."""
    exporter = _BlockingExporter()
    handle = _telemetry(exporter, max_queue_size=64, max_export_batch_size=16, schedule_delay_ms=5)
    ending = threading.Thread(target=_end_spans, args=(2000,))
    ending.start()
    ending.join(120)  # a liveness bound, not a speed figure
    stuck = ending.is_alive()
    exporter.release.set()
    ending.join()
    handle.shutdown(timeout_s=30)
    assert not stuck, "ending spans waited on a stalled exporter"
    counts = handle.counts()
    assert counts["spans_dropped"] > 0 and counts["spans_exported"] > 0
    assert counts["spans_exported"] + counts["spans_dropped"] == 2000
    assert counts["spans_exported"] == len(exporter.get_finished_spans())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settle(handle: TelemetryHandle, timeout_s: float) -> bool:
    """Shut ``handle`` down on a thread; whether it returned within a liveness bound (not a
    speed figure: a shutdown that hangs never returns at all)."""
    closing = threading.Thread(target=handle.shutdown, args=(timeout_s,), daemon=True)
    closing.start()
    closing.join(120)
    return not closing.is_alive()


def test_dead_endpoint_never_blocks_or_raises():
    """Nothing listens: ending spans raises nothing, shutdown returns, every span is counted
    as dropped with its reason."""
    handle = _telemetry(
        endpoint=f"http://127.0.0.1:{_closed_port()}",
        export_timeout_s=1.0,
        max_export_batch_size=8,
        schedule_delay_ms=10,
    )
    _end_spans(50)
    assert _settle(handle, 8.0), "shutdown hung on a dead endpoint"
    counts = handle.counts()
    assert counts["spans_exported"] == 0
    assert counts["spans_dropped"] == 50
    # a failed batch is retried until the flush limit; what is still unsent then is "shutdown"
    reasons = handle.dropped_by_reason()
    assert reasons["export_failed"] + reasons["shutdown"] == 50 and reasons["queue_full"] == 0


class _SilentEndpoint:
    """Accepts connections and reads them, never answers, until released: an exporter
    posting to it stays stuck in its request, deterministically."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connected = threading.Event()
        self.release = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.release.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.held.append(conn)
            self.connected.set()

    def close(self) -> None:
        self.release.set()
        for conn in self.held:
            conn.close()
        self.listener.close()


def test_an_endpoint_that_never_answers_never_holds_the_caller():
    """2,000 spans end while the exporter is stuck in a request nobody answers: had ending a
    span waited on the export, the thread ending them would still be stuck when released."""
    endpoint = _SilentEndpoint()
    try:
        handle = _telemetry(
            endpoint=endpoint.url,
            export_timeout_s=60.0,
            max_queue_size=64,
            max_export_batch_size=8,
            schedule_delay_ms=5,
        )
        _end_spans(8)  # a full batch: the exporter posts it and waits for an answer
        assert endpoint.connected.wait(60), "the exporter never reached the endpoint"
        ending = threading.Thread(target=_end_spans, args=(2000,), daemon=True)
        ending.start()
        ending.join(120)  # a liveness bound, not a speed figure
        stuck = ending.is_alive()
        still_unanswered = not endpoint.release.is_set()
    finally:
        endpoint.close()
    assert still_unanswered
    assert not stuck, "ending spans waited on an exporter stuck in its request"
    assert _settle(handle, 10.0), "shutdown hung on an endpoint that never answered"
    counts = handle.counts()
    assert counts["spans_exported"] == 0
    # the batch it was stuck on went out whole: the endpoint may have it, so it is unknown
    # (and so is one sent whole on a connection the closing endpoint then reset)
    assert counts["spans_unknown"] >= 8
    assert counts["spans_dropped"] + counts["spans_unknown"] == 2008
    assert handle.dropped_by_reason()["queue_full"] > 0


async def _receiver(status: int) -> tuple[web.AppRunner, str, list[ExportTraceServiceRequest]]:
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        if status == 200:
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(body)
            received.append(msg)
        return web.Response(status=status, body=b"")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner, port = await serve_on_loopback(app)
    return runner, f"http://127.0.0.1:{port}", received


async def test_endpoint_answering_500_never_blocks_or_raises():
    runner, endpoint, _ = await _receiver(500)
    try:
        handle = _telemetry(endpoint=endpoint, export_timeout_s=2.0, schedule_delay_ms=10)
        worst = _end_spans(30)
        assert worst < 0.5
        await asyncio.to_thread(handle.shutdown, 8.0)
        assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 30}
        assert handle.dropped_by_reason()["export_failed"] == 30
    finally:
        await runner.cleanup()


async def test_otlp_http_reaches_a_loopback_receiver_with_resource():
    runner, endpoint, received = await _receiver(200)
    try:
        handle = setup_telemetry(
            _settings(endpoint=endpoint, schedule_delay_ms=10),
            service_name="rollgym-driver",
            run_id="run-x",
        )
        with spans.job_span("run-x"), spans.dispatch_span({"task_index": 1}, "a", "a"):
            pass
        await asyncio.to_thread(handle.shutdown, 8.0)
        assert _two(handle.counts()) == {"spans_exported": 2, "spans_dropped": 0}
        names = set()
        for msg in received:
            for rs in msg.resource_spans:
                res = {a.key: a.value.string_value for a in rs.resource.attributes}
                assert res["gym.run.id"] == "run-x"
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        names.add(s.name)
                        if s.name == "gym.rollout.dispatch":
                            assert len(s.links) == 1 and not s.parent_span_id
        assert names == {"gym.job", "gym.rollout.dispatch"}
    finally:
        await runner.cleanup()
