"""Ingest benchmark: sustained spans/s into the trace store over OTLP/HTTP on loopback.

Starts the real store (``start_trace_store``, a child process writing SQLite), pre-encodes
distinct protobuf ExportTraceServiceRequests shaped like rollgym spans (so the sender costs
almost nothing), posts them from a few concurrent keep-alive connections, and counts a span
only when the store answered 200 (= committed). Target: >= 50,000 spans/s.

    python bench/ingest.py [--spans 300000] [--batch 512] [--senders 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import aiohttp
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from rollgym.telemetry import names
from rollgym.tracestore.launch import start_trace_store

TARGET = 50_000
SPAN_NAMES = (names.SPAN_ROLLOUT, names.SPAN_MODEL_CHAT, names.SPAN_ENV_TOOL, "POST /run")


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def encode_batches(total: int, batch: int) -> list[bytes]:
    """Distinct requests (fresh ids each), ~10 spans per trace, rollgym-like attributes."""
    out = []
    now = time.time_ns()
    serial = 0
    for _ in range(0, total, batch):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(
            [_kv("service.name", "rollgym-agent"), _kv(names.RUN_ID, "bench-run")]
        )
        spans = resource_spans.scope_spans.add().spans
        trace_id, parent = os.urandom(16), b""
        for i in range(batch):
            if i % 10 == 0:
                trace_id, parent = os.urandom(16), b""
            serial += 1
            span_id = os.urandom(8)
            rollout = f"{serial // 10}-0"
            span = Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=names.SPAN_DISPATCH if not parent else SPAN_NAMES[i % len(SPAN_NAMES)],
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=now + i * 1000,
                end_time_unix_nano=now + i * 1000 + 5_000_000,
            )
            span.attributes.extend(
                [
                    _kv(names.ROLLOUT_ID, rollout),
                    _kv(names.ROLLOUT_ATTEMPT, 0),
                    _kv(names.DISPATCH_NAME, "simple_agent"),
                    _kv(names.GEN_AI_REQUEST_MODEL, "sim-policy"),
                    _kv(names.GEN_AI_USAGE_OUTPUT_TOKENS, 123),
                    _kv(names.HTTP_RESPONSE_STATUS_CODE, 200),
                ]
            )
            spans.append(span)
            parent = parent or span_id
        out.append(request.SerializeToString())
    return out


async def send_all(url: str, bodies: list[bytes], senders: int) -> int:
    queue = list(reversed(bodies))
    headers = {"Content-Type": "application/x-protobuf"}
    sent = 0

    async def sender(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while queue:
            body = queue.pop()
            async with session.post(url, data=body, headers=headers) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"store answered {answer.status}")
            sent += 1

    connector = aiohttp.TCPConnector(limit=senders)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(sender(session) for _ in range(senders)))
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=4)
    args = parser.parse_args()
    bodies = encode_batches(args.spans, args.batch)
    spans = len(bodies) * args.batch
    with tempfile.TemporaryDirectory() as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "store.log")
        try:
            start = time.perf_counter()
            asyncio.run(send_all(store.traces_endpoint, bodies, args.senders))
            elapsed = time.perf_counter() - start
        finally:
            store.stop()
    rate = spans / elapsed
    print(f"ingest: {spans} spans in {len(bodies)} requests of {args.batch}, {elapsed:.2f} s")
    print(f"ingest: {rate:,.0f} spans/s sustained (target {TARGET:,}: ratio {rate / TARGET:.2f})")


if __name__ == "__main__":
    main()
