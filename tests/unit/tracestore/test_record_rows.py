"""Span records posted by rollgym's own exporter children become exactly the rows the same
records give through OTLP (encoded by the child's wire encoder, read by the store's wire
reader), or the same refusal; and through a real store and exporter child, the same spans
stored either way give the same database rows."""

from __future__ import annotations

import marshal
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rollgym.telemetry import names
from rollgym.telemetry.pipeline.child import otlp_encoder
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.telemetry.pipeline.wire import encode_request
from rollgym.tracestore import native, record_rows
from rollgym.tracestore.decode import PayloadError, SpanBatch
from rollgym.tracestore.native import rows_from_protobuf
from rollgym.tracestore.store import SCHEMA, ResourceRegistry
from rollgym.tracestore.store_process import start_trace_store
from span_records import RESOURCE, records_body, span_record

OTHER_SCOPE = ("rollgym.http", None, "https://schema")


def _records() -> list[tuple[Any, ...]]:
    """Every shape the driver and servers record, and the values OTLP cannot carry."""
    return [
        span_record(1),
        span_record(
            2,
            parent_span_id=0x77,
            parent_is_remote=True,
            name="POST /rollout",
            kind=2,
            attributes={
                "http.status_code": 200,
                "ok": True,
                "ratio": 0.25,
                "nan": float("nan"),
                "tags": ("a", "b"),
                "nested": [1, (2, 3)],
                "huge": 1 << 70,  # beyond 64 bits: OTLP leaves it out
                "mapping": {"no": 1},  # not an attribute value: left out
                "raw": b"bytes",
                "mixed": (1, b"x"),  # one item it cannot carry: the whole value left out
                "negative": -5,
            },
            status_code=2,
            status_message="boom",
            scope=OTHER_SCOPE,
        ),
        span_record(
            3,
            attributes={
                names.ROLLOUT_REWARD: 1,
                names.ROLLOUT_ATTEMPT: 2,
                names.ROLLOUT_OUTCOME: "ok",
                names.ROLLOUT_ID: ("tuple", "id"),
            },
            events=[
                ("exception", 5, {"exception.type": "ValueError", "x": 1 << 80}),
                ("e", 6, None),
            ],
            links=[(0xDEF, 0x42, True, {"link.kind": "job"}), (0xDEF, 0x43, False, None)],
            trace_state=(("k", "v"),),
            status_code=1,
        ),
        span_record(4, scope=("", None, None), attributes={}),
        span_record(5, kind=4, name=names.SPAN_DISPATCH, attributes={names.ROLLOUT_REWARD: True}),
    ]


@pytest.fixture(params=["python", "compiled"])
def reader(request: pytest.FixtureRequest) -> ModuleType:
    """Each records reader: the pure-Python module, and the compiled copy when it is built."""
    if request.param == "python":
        return record_rows
    compiled = native.compiled_readers()
    if compiled is None:
        pytest.skip("the compiled readers are not built (pip install -e . builds them)")
    return compiled[2]


def _registry() -> ResourceRegistry:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    return ResourceRegistry(conn)


def _via_otlp(records: list[tuple[Any, ...]]) -> SpanBatch | str:
    try:
        return rows_from_protobuf(encode_request(RESOURCE, records), _registry())
    except (PayloadError, ValueError, TypeError) as exc:  # the child or the store refuses
        return f"refused: {type(exc).__name__}"


def _via_records(
    records: list[tuple[Any, ...]], reader: ModuleType = record_rows
) -> SpanBatch | str:
    try:
        return reader.rows_from_records(records_body(records), _registry())
    except PayloadError as exc:
        return f"refused: {type(exc).__name__}"


def _rows(batch: SpanBatch | str) -> object:
    if isinstance(batch, str):
        return batch
    return (batch.resources, batch.spans, batch.links, batch.dispatches)


def test_records_give_the_rows_otlp_gives(reader: ModuleType) -> None:
    records = _records()
    by_otlp = _via_otlp(records)
    assert not isinstance(by_otlp, str), by_otlp
    assert len(by_otlp.spans) == len(records) and by_otlp.links and by_otlp.dispatches
    assert _rows(_via_records(records, reader)) == _rows(by_otlp)


@pytest.mark.parametrize("n", range(1, 6))
def test_each_record_alone_gives_the_rows_otlp_gives(n: int, reader: ModuleType) -> None:
    record = _records()[n - 1]
    assert _rows(_via_records([record], reader)) == _rows(_via_otlp([record]))


#: A text no UTF-8 carries (lone surrogates: user code gets them from Python's own ``json``),
#: in each place of a record a text can be.
HOSTILE = {
    "name": {"name": "execute_tool read\ud800"},
    "status_message": {"status_code": 2, "status_message": "unknown tool 'x\udc00'"},
    "attribute value": {"attributes": {names.ROLLOUT_ID: "r9", "gen_ai.tool.name": "a\ud800"}},
    "attribute key": {"attributes": {names.ROLLOUT_ID: "r9", "k\ud800": 1}},
    "rollout id": {"attributes": {names.ROLLOUT_ID: "r\ud8009"}},
    "event": {"events": [("exception\ud800", 5, {"exception.message": "\udfff"})]},
    "link": {"links": [(0xDEF, 0x55, False, {"why": "x\ud800"})]},
    "scope": {"scope": ("rollgym\ud800", None, None)},
}


@pytest.mark.parametrize("place", sorted(HOSTILE))
def test_a_text_that_is_not_valid_unicode_costs_only_its_characters(
    place: str, reader: ModuleType
) -> None:
    batch = [span_record(1), span_record(9, **HOSTILE[place]), span_record(2)]
    by_records = _via_records(batch, reader)
    by_otlp = rows_from_protobuf(otlp_encoder(RESOURCE)(batch), _registry())
    assert not isinstance(by_records, str), by_records
    assert _rows(by_records) == _rows(by_otlp)
    assert len(by_records.spans) == 3  # the spans beside it are kept
    assert "\ufffd" in repr(_rows(by_records))  # each bad character replaced, no more
    assert "\ud800" not in repr(_rows(by_records)) and "\udc00" not in repr(_rows(by_records))


def test_a_valid_pair_of_surrogates_becomes_its_character() -> None:
    batch = [span_record(9, attributes={names.ROLLOUT_ID: "r9", "emoji": "\ud83d\ude00"})]
    by_records = _via_records(batch)
    assert not isinstance(by_records, str)
    assert "\U0001f600" in by_records.spans[0][13] or "😀" in by_records.spans[0][13]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not marshal",
        marshal.dumps((2, marshal.dumps(RESOURCE), [])),  # another format
        marshal.dumps((1, marshal.dumps(RESOURCE), [marshal.dumps(("short",))])),
        marshal.dumps((1, marshal.dumps(RESOURCE), [b"\x00garbage"])),
        marshal.dumps((1, marshal.dumps(RESOURCE), [marshal.dumps(span_record(1, trace_id="x"))])),
        marshal.dumps(
            (1, marshal.dumps(RESOURCE), [marshal.dumps(span_record(1, trace_id=1 << 200))])
        ),
    ],
)
def test_a_malformed_records_body_is_a_bad_payload(body: bytes, reader: ModuleType) -> None:
    with pytest.raises(PayloadError):
        reader.rows_from_records(body, _registry())


def _stored(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(db) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in ("resources", "spans", "links", "dispatches")
        }


def _ship(endpoint: str, records: list[tuple[Any, ...]], *, as_records: bool) -> dict[str, int]:
    shipper = SpanShipper(
        url=f"{endpoint}/v1/traces",
        headers=None,
        resource=RESOURCE,
        timeout_s=10.0,
        patience_s=30.0,
        idempotent=True,
        records=as_records,
    )
    for record in records:
        shipper.on_end(record)
    assert shipper.flush(60.0)
    shipper.shutdown(30.0)
    return shipper.counts.snapshot()


def _stored_both_ways(tmp_path: Path, records: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The database rows of ``records`` shipped to a real store over OTLP, then as records;
    every span exported, none dropped, either way."""
    stored = []
    for as_records in (False, True):
        folder = tmp_path / ("records" if as_records else "otlp")
        store = start_trace_store(folder / "traces.db", folder / "store.log")
        try:
            counts = _ship(store.endpoint, records, as_records=as_records)
        finally:
            store.stop()
        assert (counts["spans_exported"], counts["spans_dropped"]) == (len(records), 0), counts
        stored.append(_stored(folder / "traces.db"))
    return stored


def test_a_store_stores_the_same_rows_from_records_as_from_otlp(tmp_path: Path) -> None:
    by_otlp, by_records = _stored_both_ways(tmp_path, [r for r in _records() if r[0] != 0])
    assert by_records["spans"] and by_records == by_otlp


def test_a_lone_surrogate_through_a_real_store_loses_no_span(tmp_path: Path) -> None:
    """Through a real shipper, exporter child and store: every span of a batch that holds
    lone surrogates everywhere is stored, both ways, with the same rows."""
    hostile = [span_record(10 + i, **fields) for i, fields in enumerate(HOSTILE.values())]
    records = [span_record(1), *hostile, span_record(2)]
    by_otlp, by_records = _stored_both_ways(tmp_path, records)
    assert len(by_records["spans"]) == len(records)
    assert by_records == by_otlp
    assert "\ufffd" in repr(by_records["spans"])
