"""The trace store's writer cost: CPU per span of inserting and committing decoded requests.

Decodes requests shaped like ``bench/ingest.py``'s (rollgym-like spans, 512 a request) once,
then stores them with :class:`rollgym.tracestore.store.TraceStore` (apsw, one transaction a
request, as the store's workers do) and, for reference in the same run, with the same
statements through Python's ``sqlite3`` module; rounds alternate. It times the writing
thread's CPU (``time.thread_time``), not wall time, so other load moves it little, and checks
that both wrote the same rows (``typeof`` included).

    python bench/store_writer.py [--spans 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from ingest import encode_batches  # noqa: E402

from rollgym.tracestore import store as trace_store  # noqa: E402
from rollgym.tracestore.decode import SpanBatch  # noqa: E402
from rollgym.tracestore.native import rows_from_protobuf  # noqa: E402

ROWS = "SELECT *, typeof(parent_span_id), typeof(status_message) FROM spans ORDER BY rowid"


def _with_store(path: Path, batches: list[SpanBatch]) -> float:
    store = trace_store.TraceStore(path)
    start = time.thread_time()
    for batch in batches:
        store.write_batch(batch)
    spent = time.thread_time() - start
    store.close()
    return spent


def _with_sqlite3(path: Path, batches: list[SpanBatch]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-65536"):
        conn.execute(f"PRAGMA {pragma}")
    conn.executescript(trace_store.SCHEMA)
    start = time.thread_time()
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(trace_store.INSERT_RESOURCE, batch.resources)
        conn.executemany(trace_store.INSERT_SPAN, batch.spans)
        conn.executemany(trace_store.INSERT_LINK, batch.links)
        conn.executemany(trace_store.INSERT_DISPATCH, batch.dispatches)
        conn.execute("COMMIT")
    spent = time.thread_time() - start
    conn.close()
    return spent


def _rows(path: Path) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return conn.execute(ROWS).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        registry = trace_store.TraceStore(Path(tmp) / "ids.db").resources
        batches = [rows_from_protobuf(body, registry) for body in encode_batches(args.spans, 512)]
        spans = sum(len(batch.spans) for batch in batches)
        cost: dict[str, list[float]] = {"store (apsw)": [], "sqlite3": []}
        for i in range(args.rounds):
            ours, theirs = Path(tmp) / f"a{i}.db", Path(tmp) / f"s{i}.db"
            cost["store (apsw)"].append(_with_store(ours, batches) / spans * 1e6)
            cost["sqlite3"].append(_with_sqlite3(theirs, batches) / spans * 1e6)
            if _rows(ours) != _rows(theirs):
                raise SystemExit("the two writers stored different rows")
    for name, values in cost.items():
        listed = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:>13}: {listed} us CPU per span (median {statistics.median(values):.2f})")
    ratio = statistics.median(cost["store (apsw)"]) / statistics.median(cost["sqlite3"])
    print(f"writer CPU per span, {spans:,} spans in requests of 512: store / sqlite3 {ratio:.2f}")


if __name__ == "__main__":
    main()
