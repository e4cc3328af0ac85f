"""The store's workers: decoders and one writer committing requests in groups lose nothing and
count exactly, and a request whose transaction fails is answered as failed with none of its
rows stored while the others' are, even those committed in the same group. Span records,
which the writer reads itself, are held to the same: mixed with OTLP in a group, and a
records body that cannot be read refused alone."""

from __future__ import annotations

import asyncio
import marshal
import os
import sqlite3
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from rollgym.telemetry.pipeline.frames import RECORDS_TYPE
from rollgym.tracestore.decode import PayloadError
from rollgym.tracestore.store import TraceStore
from rollgym.tracestore.store_workers import StoreFailed
from rollgym.tracestore.writer import BatchWriter
from span_records import records_body, span_record

PROTOBUF = "application/x-protobuf"


def _request(spans: int, name: str = "work") -> bytes:
    request = ExportTraceServiceRequest()
    out = request.resource_spans.add().scope_spans.add().spans
    for index in range(spans):
        out.append(
            Span(
                trace_id=os.urandom(16),
                span_id=os.urandom(8),
                name=name if index == spans - 1 else "work",
                start_time_unix_nano=1,
                end_time_unix_nano=2,
            )
        )
    return request.SerializeToString()


def _names(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM spans")]


def _records(spans: int, name: str = "work") -> bytes:
    """A span records body, as the run's own exporter children post it (fresh ids each)."""
    first = int.from_bytes(os.urandom(6), "big") << 8
    named = [name if index == spans - 1 else "work" for index in range(spans)]
    return records_body([span_record(first + i, name=n) for i, n in enumerate(named)])


async def _store_all(
    writer: BatchWriter, bodies: list[bytes], types: list[str] | None = None
) -> list[int | BaseException]:
    kinds = types or [PROTOBUF] * len(bodies)
    return await asyncio.gather(
        *(writer.store(body, kind) for body, kind in zip(bodies, kinds, strict=True)),
        return_exceptions=True,
    )


def test_two_workers_writing_at_once_store_every_span_once(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    writer = BatchWriter(db, decode_workers=2, max_pending=8)
    writer.start()
    try:
        counts = asyncio.run(_store_all(writer, [_request(37) for _ in range(24)]))
    finally:
        writer.close()
    assert counts == [37] * 24
    assert writer.spans_written == 24 * 37
    assert len(_names(db)) == 24 * 37
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def test_a_failed_transaction_stores_none_of_its_request(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    TraceStore(db).close()  # the schema, then a trigger that refuses one span name
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON spans WHEN NEW.name = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
        )
    writer = BatchWriter(db, decode_workers=2)
    writer.start()
    try:
        bodies = [_request(9), _request(9, name="poison"), _request(9)]
        results = asyncio.run(_store_all(writer, bodies))
    finally:
        writer.close()
    assert results[0] == results[2] == 9
    assert isinstance(results[1], StoreFailed)
    assert "refused by test" in str(results[1])
    assert writer.spans_written == 18
    assert _names(db) == ["work"] * 18  # none of the failed request's 8 good spans


def test_one_request_that_cannot_be_stored_costs_no_other_in_its_group(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON spans WHEN NEW.name = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
        )
    writer = BatchWriter(db, decode_workers=2, max_pending=64)
    writer.start()
    try:  # 40 requests at once: while one group commits, the next ones wait and group up
        bodies = [_request(5, name="poison" if index == 20 else "work") for index in range(40)]
        results = asyncio.run(_store_all(writer, bodies))
    finally:
        writer.close()
    assert isinstance(results[20], StoreFailed)
    assert results[:20] + results[21:] == [5] * 39
    assert writer.spans_written == 39 * 5
    assert _names(db) == ["work"] * 39 * 5


def test_a_bad_payload_touches_nothing(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    writer = BatchWriter(db, decode_workers=1)
    writer.start()
    try:
        results = asyncio.run(_store_all(writer, [b"\xff\xff\xff", _request(3)]))
    finally:
        writer.close()
    assert isinstance(results[0], PayloadError)
    assert results[1] == 3
    assert len(_names(db)) == 3


def test_records_and_otlp_in_the_same_groups_store_every_span_once(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    writer = BatchWriter(db, decode_workers=1, max_pending=64)
    writer.start()
    try:  # 30 requests at once, every third one OTLP: groups hold both kinds
        bodies = [_request(11) if i % 3 == 0 else _records(11) for i in range(30)]
        types = [PROTOBUF if i % 3 == 0 else RECORDS_TYPE for i in range(30)]
        counts = asyncio.run(_store_all(writer, bodies, types))
    finally:
        writer.close()
    assert counts == [11] * 30
    assert writer.spans_written == 30 * 11
    assert len(_names(db)) == 30 * 11


def test_a_records_body_that_cannot_be_read_touches_nothing_and_costs_no_other(
    tmp_path: Path,
) -> None:
    db = tmp_path / "traces.db"
    writer = BatchWriter(db, decode_workers=1, max_pending=64)
    writer.start()
    try:
        bad = marshal.dumps((1, b"\x00not a resource", [b"garbage"]))
        bodies = [_records(4, name=f"r{i}") if i != 7 else bad for i in range(20)]
        results = asyncio.run(_store_all(writer, bodies, [RECORDS_TYPE] * 20))
    finally:
        writer.close()
    assert isinstance(results[7], PayloadError)
    assert results[:7] + results[8:] == [4] * 19
    assert sorted(n for n in _names(db) if n != "work") == sorted(
        f"r{i}" for i in range(20) if i != 7
    )
