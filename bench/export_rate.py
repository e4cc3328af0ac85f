"""Span export rate: where loss begins through rollgym's span pipeline.

A loopback OTLP receiver (aiohttp, in its own process like the real trace store) accepts
``POST /v1/traces``, decodes each request with ``opentelemetry.proto`` and counts spans, bytes
and requests. The bench offers spans at increasing rates, paced in 10 ms ticks, through one of
the pipeline's exporter sides with the config's default queue settings, and reports the first
offered rate at which spans are dropped. Target: no loss up to >= 50,000 spans/s offered.

``--pipeline process`` (default) offers span records to the exporter child's shipper (a queue
here, OTLP encoding and export in a child process: what a run uses for OTLP/HTTP);
``--pipeline in-process`` offers the same records to the in-process exporter side with the
SDK's OTLP/HTTP exporter (what gRPC, the console, and OTLP/HTTP without a child use).

By default the offered records are built before the clock starts, handed to the exporter side's
``on_end`` exactly as a span's ``end()`` does: that measures the export path, not the cost of
creating spans in Python. ``--create`` creates and
ends a real span per offer instead (end to end; in one process the producer then shares the
GIL with the exporter thread, so on a small machine it saturates before loss begins).

    python bench/export_rate.py [--duration 3] [--rates 5000,10000,...] [--create]
                                [--pipeline process|in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from opentelemetry.sdk.resources import Resource

from rollgym.config import TelemetryConfig
from rollgym.telemetry.pipeline.in_process import InProcessExport
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.records import SpanRecord
from rollgym.telemetry.pipeline.shipper import SpanShipper

TARGET = 50_000
DEFAULT_RATES = (10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 85_000, 100_000)
#: Attributes like a real rollout span (identity, dispatch name, HTTP destination).
ATTRS = {
    "gym.rollout.id": "1234-3-a1",
    "gym.rollout.dispatch.name": "simple_agent",
    "gym.http.destination.server.name": "simple_agent",
    "http.request.method": "POST",
    "server.port": 8000,
}


# --- the receiver (own process) ---------------------------------------------------------------
def _receiver_main(conn: Connection) -> None:
    from _loopback_app import serve_until_told
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    totals = {"spans": 0, "bytes": 0, "requests": 0}
    ok = ExportTraceServiceResponse().SerializeToString()

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(body)
        totals["requests"] += 1
        totals["bytes"] += len(body)
        totals["spans"] += sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)
        return web.Response(body=ok, content_type="application/x-protobuf")

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(totals)

    async def main() -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/traces", traces)
        app.router.add_get("/stats", stats)
        await serve_until_told(app, conn)

    asyncio.run(main())


def _stats(port: int) -> dict[str, int]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as resp:
        return json.loads(resp.read())


# --- one offered rate ---------------------------------------------------------------------------
@dataclass
class Step:
    rate: int
    offered: float  # spans/s the producer actually achieved
    elapsed: float
    exported: int
    dropped: int
    received: int
    flush_s: float


def prebuilt_records(n: int) -> list[SpanRecord]:
    """``n`` distinct finished span records, as rollgym's own pipeline queues them."""
    records: list[SpanRecord] = []
    tracer = RecordingTracerProvider(records.append).get_tracer("bench")
    for _ in range(n):
        tracer.start_span("gym.rollout", attributes=ATTRS).end()
    return records


def _in_process_path(port: int) -> tuple[Any, Any, Any]:
    """(offer, provider, counts-holder) for the in-process side + the SDK's OTLP/HTTP exporter."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    defaults = TelemetryConfig()
    export = InProcessExport(
        OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=10),
        Resource({"service.name": "bench"}),
        max_queue_size=defaults.max_queue_size,
        max_export_batch_size=defaults.max_export_batch_size,
        schedule_delay_ms=defaults.schedule_delay_ms,
    )
    provider = RecordingTracerProvider(export.on_end, on_shutdown=export.shutdown)
    return export.on_end, provider, export


def _process_path(port: int) -> tuple[Any, Any, Any]:
    """The same for rollgym's own pipeline: a queue here, encoding and export in a child."""
    defaults = TelemetryConfig()
    shipper = SpanShipper(
        url=f"http://127.0.0.1:{port}/v1/traces",
        headers=None,
        resource={"service.name": "bench"},
        timeout_s=10,
        max_queue_size=defaults.max_queue_size,
        max_export_batch_size=defaults.max_export_batch_size,
        schedule_delay_ms=defaults.schedule_delay_ms,
    )
    provider = RecordingTracerProvider(shipper.on_end, on_shutdown=shipper.shutdown)
    return shipper.on_end, provider, shipper


def run_step(port: int, rate: int, duration: float, pool: list[Any] | None, pipeline: str) -> Step:
    before = _stats(port)["spans"]
    offer, provider, processor = (_process_path if pipeline == "process" else _in_process_path)(
        port
    )
    tracer = provider.get_tracer("bench")
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    ticks = round(duration / tick)
    start = time.perf_counter()
    k = 0
    for i in range(ticks):
        if pool is None:
            for _ in range(per_tick):
                tracer.start_span("gym.rollout", attributes=ATTRS).end()
        else:
            for _ in range(per_tick):
                offer(pool[k])
                k = k + 1 if k + 1 < len(pool) else 0
        ahead = start + (i + 1) * tick - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
    elapsed = time.perf_counter() - start
    t0 = time.perf_counter()
    provider.shutdown()
    flush_s = time.perf_counter() - t0
    counts = processor.counts
    counts.close()
    return Step(
        rate=rate,
        offered=per_tick * ticks / elapsed,
        elapsed=elapsed,
        exported=counts.exported,
        dropped=counts.total_dropped(),
        received=_stats(port)["spans"] - before,
        flush_s=flush_s,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per offered rate")
    parser.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES)))
    parser.add_argument("--create", action="store_true", help="create a real span per offer")
    parser.add_argument(
        "--pipeline",
        choices=("process", "in-process"),
        default="process",
        help="the exporter child (default) or the in-process exporter side",
    )
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    pool: list[Any] | None = None
    if not args.create:
        pool = prebuilt_records(20_000)
    mode = "spans created and ended per offer" if args.create else "prebuilt finished spans"
    mode += f", {args.pipeline} pipeline"

    parent, child = mp.Pipe()
    receiver = mp.get_context("spawn").Process(target=_receiver_main, args=(child,), daemon=True)
    receiver.start()
    port = parent.recv()
    loss_at: int | None = None
    best_clean = 0.0
    sustained = 0.0
    try:
        print(f"mode: {mode}; queue/batch/delay: config defaults")
        print(
            f"{'target/s':>9} {'offered/s':>10} {'exported':>9} {'dropped':>8} {'received':>9} {'flush s':>8}"
        )
        for rate in rates:
            step = run_step(port, rate, args.duration, pool, args.pipeline)
            print(
                f"{step.rate:>9} {step.offered:>10.0f} {step.exported:>9} {step.dropped:>8} "
                f"{step.received:>9} {step.flush_s:>8.2f}"
            )
            if step.received != step.exported:
                print("  warning: receiver count differs from exported count")
            if step.dropped:
                loss_at = round(step.offered)
                break
            best_clean = max(best_clean, step.offered)
            sustained = max(sustained, step.exported / (step.elapsed + step.flush_s))
            if step.offered < 0.9 * rate:
                print("  the producer cannot offer more on this machine; stopping")
                break
    finally:
        parent.send("stop")
        receiver.join(5)
    print(f"highest offered rate with no loss: {best_clean:.0f} spans/s")
    print(f"sustained export (spans / (offer time + flush time)): {sustained:.0f} spans/s")
    if loss_at is not None:
        print(f"loss begins at: {loss_at} spans/s (target >= {TARGET})")
    else:
        print(f"no loss up to {best_clean:.0f} spans/s (target >= {TARGET})")
    result = loss_at if loss_at is not None else best_clean
    return 0 if result >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
