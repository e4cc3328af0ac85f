"""The store's decode worker processes: a dead one costs one retryable answer, none outlives
the store, resource rows keep one id across workers and restarts, and a run whose spans are
all span records (read by the writer) starts none."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from procs import alive as _alive
from rollgym.telemetry import names
from rollgym.telemetry.pipeline.frames import RECORDS_TYPE
from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store
from span_records import records_body, span_record
from waits import wait_until

WAIT_S = 60.0
PROTOBUF = "application/x-protobuf"


def _request(spans: int) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(
        KeyValue(key=names.RUN_ID, value=AnyValue(string_value="run-w"))
    )
    out = resource_spans.scope_spans.add().spans
    for _ in range(spans):
        out.append(
            Span(
                trace_id=os.urandom(16),
                span_id=os.urandom(8),
                name="work",
                start_time_unix_nano=1,
                end_time_unix_nano=2,
            )
        )
    return request.SerializeToString()


def _post(store: TraceStoreProcess, body: bytes, content_type: str = PROTOBUF) -> int:
    request = urllib.request.Request(store.traces_endpoint, data=body, method="POST")
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _workers(store_pid: int) -> list[int]:
    """The store's decode workers: its children started by multiprocessing's spawn."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == str(store_pid) and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


def _spans(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0])


def test_a_killed_decode_worker_costs_one_retryable_answer(store: TraceStoreProcess) -> None:
    assert _post(store, _request(5)) == 200
    workers = _workers(store.process.pid)
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    statuses = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        statuses.append(_post(store, _request(7)))
        if statuses[-1] == 200:
            break
    assert statuses[-1] == 200, statuses
    assert set(statuses) <= {200, 503}
    assert _spans(store.db_path) == 12  # what was answered 503 was not stored
    assert store.process.poll() is None


def test_decode_workers_die_with_a_killed_store(tmp_path: Path) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        assert _post(store, _request(3)) == 200
        workers = _workers(store.process.pid)
        assert workers
    finally:
        store.process.kill()
        store.process.wait()
    wait_until(
        lambda: not any(_alive(pid) for pid in workers),
        "the decode workers to die with their store",
        WAIT_S,
    )


def test_a_resource_keeps_one_row_across_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    for _ in range(2):
        store = start_trace_store(db, tmp_path / "store.log")
        try:
            for _ in range(3):
                assert _post(store, _request(4)) == 200
        finally:
            assert store.stop() == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM resources").fetchone()[0] == 1
        assert (
            conn.execute(
                "SELECT COUNT(*) FROM spans s JOIN resources r ON r.id = s.resource_id"
            ).fetchone()[0]
            == 24
        )


def test_span_records_start_no_decoder_and_the_first_otlp_request_does(tmp_path: Path) -> None:
    store = start_trace_store(tmp_path / "traces.db", tmp_path / "store.log")
    try:
        assert _post(store, records_body([span_record(n) for n in range(6)]), RECORDS_TYPE) == 200
        assert len(_workers(store.process.pid)) == 1  # the writer alone
        assert _post(store, _request(3)) == 200
        assert len(_workers(store.process.pid)) >= 2  # and now a decoder
    finally:
        assert store.stop() == 0
    assert _spans(tmp_path / "traces.db") == 9
