"""Ingest benchmark: the trace store against a naive sink, same requests, same run.

Starts the real store (``start_trace_store``, a child process writing SQLite), pre-encodes
distinct protobuf ExportTraceServiceRequests shaped like rollgym spans (so the sender costs
almost nothing), posts them from a few concurrent keep-alive connections, and counts a span
only when the store answered 200 (= committed).

The reference is the simplest receiver that keeps every span: an aiohttp process that decodes
each request with ``opentelemetry-proto`` and appends one JSON line per span to a file (ids,
name, kind, times, status, attributes read field by field: faster than ``MessageToDict``),
nothing else (no index, no transaction, no fsync). Rounds alternate store, sink, store, sink... over fresh
requests; the ratio store / sink of the median rates must be >= 1.0.

It also prints the CPU each side spends per span (``/proc``: the store process and each kind of
worker process, by name: ``rollgym-decode``, ``rollgym-write``; the sink's one process), which other load on the machine moves much less than the
rates: on a busy machine read that line first.

    python bench/ingest.py [--spans 300000] [--batch 512] [--senders 4] [--rounds 3] [--random-ids]
                           [--pure-python]

``--pure-python`` makes the store decode with the pure-Python readers even where the compiled
ones are built (``setup.py``; the last line says which decoded).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from rollgym.telemetry import names
from rollgym.telemetry.sampling import time_ordered_trace_id
from rollgym.tracestore import native
from rollgym.tracestore.store_process import start_trace_store

TARGET = 1.0
TICKS = os.sysconf("SC_CLK_TCK")
SPAN_NAMES = (names.SPAN_ROLLOUT, names.SPAN_MODEL_CHAT, names.SPAN_ENV_TOOL, "POST /run")


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


#: Trace starts per second of the simulated run whose ids the requests carry: 10 spans a trace,
#: so 100,000 spans a second, about the rate this bench offers the store.
TRACES_PER_SECOND = 10_000


def _trace_id(serial: int, random_ids: bool) -> bytes:
    """The ``serial``-th trace's id: 16 random bytes (another tracer's spans), or time-ordered
    as rollgym's tracers make them, stamped as if traces began at TRACES_PER_SECOND."""
    if random_ids:
        return os.urandom(16)
    second = _EPOCH + serial // TRACES_PER_SECOND
    return (second << 96 | time_ordered_trace_id() & _LOW_96).to_bytes(16, "big")


_EPOCH = int(time.time())
_LOW_96 = (1 << 96) - 1


def encode_batches(
    total: int, batch: int, random_ids: bool = False, first_span: int = 0
) -> list[bytes]:
    """Distinct requests (fresh ids each), ~10 spans per trace, rollgym-like attributes and
    trace ids (time-ordered, as rollgym's tracers make them; ``random_ids``: 16 random bytes).
    ``first_span``: how many spans earlier rounds made (their ids' clock goes on)."""
    out = []
    now = time.time_ns()
    serial = first_span
    for _ in range(0, total, batch):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(
            [_kv("service.name", "rollgym-agent"), _kv(names.RUN_ID, "bench-run")]
        )
        spans = resource_spans.scope_spans.add().spans
        trace_id, parent = _trace_id(serial // 10, random_ids), b""
        for i in range(batch):
            if i % 10 == 0:
                trace_id, parent = _trace_id(serial // 10, random_ids), b""
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


# --- the naive sink (own process) -------------------------------------------------------------
def _sink_main(path: str, conn: Connection) -> None:
    """Decode with opentelemetry-proto, append one JSON line per span; answer 200."""
    import orjson
    from _loopback_app import serve_until_told
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    ok = ExportTraceServiceResponse().SerializeToString()
    out = open(path, "ab")  # noqa: SIM115 - open for the life of the process

    async def traces(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        lines = [
            orjson.dumps(
                {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "status": span.status.code,
                    "attributes": {
                        kv.key: getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
                        for kv in span.attributes
                    },
                }
            )
            + b"\n"
            for resource_spans in message.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        out.write(b"".join(lines))
        return web.Response(body=ok, content_type="application/x-protobuf")

    async def main() -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", traces)
        await serve_until_told(app, conn)
        out.close()

    asyncio.run(main())


def _cpu_s(pid: int) -> tuple[int, float]:
    """A process's parent pid and its user + system CPU seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0.0
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _role(pid: int, root: int) -> str:
    """``store process``, or the worker's name (``rollgym-decode``, ``rollgym-write``)."""
    if pid == root:
        return "store process"
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "store worker"


def _cpu_by_process(root: int) -> dict[int, tuple[str, float]]:
    """Role and CPU seconds of ``root`` and of each of its child processes (the workers)."""
    found = {root: (_role(root, root), _cpu_s(root)[1])}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent, seconds = _cpu_s(int(entry))
            if parent == root:
                found[int(entry)] = (_role(int(entry), root), seconds)
    return found


def _timed(url: str, bodies: list[bytes], senders: int) -> float:
    start = time.perf_counter()
    asyncio.run(send_all(url, bodies, senders))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=300_000, help="spans per round")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--random-ids",
        action="store_true",
        help="16 random bytes per trace id (another tracer's spans) instead of rollgym's "
        "time-ordered ids",
    )
    parser.add_argument(
        "--pure-python",
        action="store_true",
        help="decode with the pure-Python readers even where the compiled ones are built",
    )
    args = parser.parse_args()
    if args.pure_python:  # inherited by the store process and its decoders
        os.environ[native.PURE_PYTHON_ENV] = "1"
    compiled = native.compiled_readers() is not None and not args.pure_python
    per_round = [
        encode_batches(args.spans, args.batch, args.random_ids, first_span=i * args.spans)
        for i in range(2 * args.rounds)
    ]
    spans = len(per_round[0]) * args.batch
    rates: dict[str, list[float]] = {"store": [], "sink": []}
    cpu: dict[str, float] = {"store process": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "store.log")
        parent, child = mp.Pipe()
        sink = mp.get_context("spawn").Process(
            target=_sink_main, args=(str(Path(tmp) / "spans.jsonl"), child), daemon=True
        )
        sink.start()
        sink_url = f"http://127.0.0.1:{parent.recv()}/v1/traces"
        try:
            for i in range(args.rounds):
                before = _cpu_by_process(store.process.pid)
                rates["store"].append(
                    spans / _timed(store.traces_endpoint, per_round[2 * i], args.senders)
                )
                after = _cpu_by_process(store.process.pid)
                for pid, (role, seconds) in after.items():
                    cpu[role] = cpu.get(role, 0.0) + seconds - before.get(pid, (role, 0.0))[1]
                sink_before = _cpu_s(sink.pid or 0)[1]
                rates["sink"].append(spans / _timed(sink_url, per_round[2 * i + 1], args.senders))
                cpu["sink"] = cpu.get("sink", 0.0) + _cpu_s(sink.pid or 0)[1] - sink_before
        finally:
            store.stop()
            parent.send("stop")
            sink.join(10)
    for name, values in rates.items():
        listed = " ".join(f"{v:,.0f}" for v in values)
        print(f"{name:>5}: {listed} spans/s (median {statistics.median(values):,.0f})")
    ratio = statistics.median(rates["store"]) / statistics.median(rates["sink"])
    pairs = [a / b for a, b in zip(rates["store"], rates["sink"], strict=True)]
    print(
        f"ingest: {spans:,} spans a round in requests of {args.batch}, {args.senders} senders, "
        f"{args.rounds} rounds each (alternating), "
        f"{'random' if args.random_ids else 'time-ordered (rollgym)'} trace ids"
    )
    print(
        f"ratio store / naive sink: {ratio:.2f} of medians, pairs {min(pairs):.2f}-"
        f"{max(pairs):.2f} (target >= {TARGET})"
    )
    per_span = {role: seconds / (spans * args.rounds) * 1e6 for role, seconds in cpu.items()}
    sink_us = per_span.pop("sink")
    store_us = sum(per_span.values())
    parts = ", ".join(f"{role} {us:.1f}" for role, us in per_span.items() if us >= 0.05)
    print(
        f"CPU per span: store {store_us:.1f} us ({parts}), sink {sink_us:.1f} us: "
        f"sink / store {sink_us / store_us:.2f} (load average {os.getloadavg()[0]:.1f})"
    )
    print(f"store decoded with the {'compiled' if compiled else 'pure-Python'} readers")


if __name__ == "__main__":
    main()
