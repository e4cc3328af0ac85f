"""The exporter child against a real slow OTLP receiver on loopback, and a dead port.

The receiver (aiohttp, in a thread) sleeps past the exporter's request timeout on requests of
more than ``FAST_UP_TO`` spans and then stores them, as MLflow's OTLP endpoint did with
4,096-span batches: the shipper must count those as *unknown* (not dropped, not delivered),
send smaller requests from then on, and deliver the rest.
"""

from __future__ import annotations

import asyncio
import marshal
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from aiohttp_loopback import serve_on_loopback
from rollgym.telemetry.loss_report import loss_line, loss_warnings
from rollgym.telemetry.pipeline import child
from rollgym.telemetry.pipeline.frames import RECORDS_FORMAT, RECORDS_TYPE
from rollgym.telemetry.pipeline.shipper import SpanShipper
from waits import wait_for

FAST_UP_TO = 64
TIMEOUT_S = 0.5


class SlowReceiver:
    """OTLP/HTTP traces on 127.0.0.1: slow for big requests, but it stores everything."""

    def __init__(self) -> None:
        self.sizes: list[int] = []  # spans per request, in arrival order
        self.stored = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.content_type == RECORDS_TYPE:  # the run's own store's way: span records
            version, _resource, packed = marshal.loads(body)
            assert version == RECORDS_FORMAT
            n = len(marshal.loads(packed))
        else:
            message = ExportTraceServiceRequest.FromString(body)
            n = sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
        self.sizes.append(n)
        if n > FAST_UP_TO:
            await asyncio.sleep(3 * TIMEOUT_S)  # past the client's timeout, then store
        self.stored += n
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def _start(self) -> None:
        app = web.Application(client_max_size=1 << 26)
        app.router.add_post("/v1/traces", self._traces)
        self._runner, port = await serve_on_loopback(app, access_log=None, shutdown_timeout=0.1)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> SlowReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with SlowReceiver() as server:
        yield server


def _record(i: int) -> tuple[Any, ...]:
    return (
        (i + 1) << 64 | 7,
        i + 1,
        0,
        False,
        "gym.rollout",
        0,
        1_000 + i,
        2_000 + i,
        {"gym.rollout.id": f"{i}-0"},
        None,
        None,
        0,
        None,
        ("rollgym", None, None),
        None,
    )


@pytest.mark.parametrize("records", [False, True], ids=["otlp", "span-records"])
def test_timed_out_batches_are_unknown_and_later_ones_smaller(
    receiver: SlowReceiver, records: bool
) -> None:
    """Both ways the child posts: OTLP, and span records (to the run's own store), where a
    batch that fits is posted as it came and a larger one is split into parts."""
    shipper = SpanShipper(
        url=receiver.url + "/v1/traces",
        headers=None,
        resource={"service.name": "t"},
        timeout_s=TIMEOUT_S,
        max_export_batch_size=256,
        # no timed send: the first batch goes out when 256 are queued, whatever the load
        schedule_delay_ms=60_000,
        records=records,
    )
    for i in range(600):
        shipper.on_end(_record(i))
    assert shipper.flush(60.0)
    shipper.shutdown(timeout_s=10.0)
    shipper.counts.close()
    counts = shipper.counts.snapshot()
    # 256 and 128 timed out (the batch halves after each); 64 and fewer are answered in time
    assert counts["spans_unknown"] == 256 + 128, (counts, receiver.sizes)
    assert counts["spans_dropped"] == 0
    assert counts["spans_exported"] == 600 - 384
    assert receiver.sizes[:3] == [256, 128, 64] and max(receiver.sizes[2:]) <= 64
    # the receiver did store the timed-out batches: "unknown" was the honest word
    assert wait_for(lambda: receiver.stored == 600), receiver.stored
    line = loss_line(counts)
    assert line is not None and "216 of 600 span(s) delivered" in line and "384 unknown" in line
    (warning,) = loss_warnings(counts)
    assert "max_export_batch_size" in warning and "flush_timeout_s" not in warning


def test_the_batch_size_halves_to_a_floor_and_the_timeout_grows_to_a_cap() -> None:
    size = child.BatchSize(512, 10.0)
    for _ in range(10):
        size.timed_out(size.spans)
    assert (size.spans, size.timeout_s) == (child.MIN_BATCH, 10.0 * child.MAX_TIMEOUT_FACTOR)
    tiny = child.BatchSize(8, 1.0)
    tiny.timed_out(tiny.spans)
    assert tiny.spans == 8  # never raised to the floor


def test_each_loss_reason_gets_its_own_remedy() -> None:
    counts: dict[str, Any] = {
        "spans_exported": 10,
        "spans_dropped": 6,
        "spans_unknown": 0,
        "spans_dropped_by_reason": {"queue_full": 4, "shutdown": 2},
    }
    full, shutdown = loss_warnings(counts)
    assert "queue_full" in full and "max_queue_size" in full and "flush_timeout_s" not in full
    assert "shutdown" in shutdown and "flush_timeout_s" in shutdown


def test_a_dead_port_is_found_by_the_probe_in_one_connect() -> None:
    from rollgym.telemetry.endpoint_probe import unreachable

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    problem = unreachable(dead)
    assert problem is not None and "refused" in problem
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert unreachable(f"http://127.0.0.1:{listener.getsockname()[1]}") is None
