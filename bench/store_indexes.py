"""What each index of the trace store costs its writer: CPU per span of inserting and
committing the same decoded requests into a store with all its indexes, then into stores each
missing one of them, then into one with none: the floor, what storing a span as a row of its
own costs SQLite before any index.

The requests are ``bench/store_writer.py``'s (``bench/ingest.py``'s rollgym-like spans, about
10 a trace, one dispatch row a trace, 512 spans a request, time-ordered trace ids), decoded
once and written with :class:`rollgym.tracestore.store.TraceStore` one transaction a request,
as the store's writer does. Rounds alternate the stores; each line is the best round's writing
thread CPU (``time.thread_time``) a span, and the difference from the first line is what that
index costs. It measures; it changes nothing: every index serves a query of the viewer, the
CLI or the checks (``rollgym/reading/queries.py``), and the unique one makes a retried export
store each span once.

    python bench/store_indexes.py [--spans 150000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ingest import encode_batches  # noqa: E402

from rollgym.tracestore import store as trace_store  # noqa: E402
from rollgym.tracestore.decode import SpanBatch  # noqa: E402
from rollgym.tracestore.native import rows_from_protobuf  # noqa: E402
from rollgym.tracestore.schema import SCHEMA  # noqa: E402

#: Every index the schema creates, by name.
INDEXES = re.findall(r"CREATE (?:UNIQUE )?INDEX IF NOT EXISTS (\w+)", SCHEMA)
#: The store with every index dropped (the key of its line).
NO_INDEX = "no index"


def _cost(path: Path, batches: list[SpanBatch], spans: int, without: str | None) -> float:
    """µs of writing-thread CPU a span, into a new store at ``path`` without index ``without``
    (or without any, for :data:`NO_INDEX`)."""
    store = trace_store.TraceStore(path)
    dropped = INDEXES if without == NO_INDEX else [without] if without is not None else []
    for index in dropped:
        store._conn.execute(f"DROP INDEX {index}")
    start = time.thread_time()
    for batch in batches:
        store.write_batch(batch)
    spent = time.thread_time() - start
    store.close()
    return spent / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ways: list[str | None] = [None, *INDEXES, NO_INDEX]
    with tempfile.TemporaryDirectory() as tmp:
        registry = trace_store.TraceStore(Path(tmp) / "ids.db").resources
        batches = [rows_from_protobuf(body, registry) for body in encode_batches(args.spans, 512)]
        spans = sum(len(batch.spans) for batch in batches)
        dispatches = sum(len(batch.dispatches) for batch in batches)
        best: dict[str | None, float] = {}
        for round_index in range(args.rounds):
            for way in ways:
                path = Path(tmp) / f"{round_index}-{way}.db"
                cost = _cost(path, batches, spans, way)
                best[way] = min(best.get(way, cost), cost)
    print(
        f"{spans:,} spans ({dispatches:,} dispatch rows), best of {args.rounds} rounds, "
        "writer CPU a span"
    )
    every = best[None]
    print(f"  {'all indexes':34s} {every:6.2f} us")
    for way in INDEXES:
        print(
            f"  {'without ' + way:34s} {best[way]:6.2f} us  (the index: {every - best[way]:+.2f})"
        )
    floor = best[NO_INDEX]
    print(
        f"  {'no index at all (the row alone)':34s} {floor:6.2f} us  (all indexes: {every - floor:+.2f})"
    )


if __name__ == "__main__":
    main()
