"""The trace store's writer as the store grows: rollgym's time-ordered trace ids vs random ones.

Why: spans are indexed by ``(trace_id, span_id)``. With random trace ids every new span goes
to a random page of that index, so each one dirties a page of its own (one more WAL frame per
span, copied again at the checkpoint) and, once the index is larger than the writer's page
cache (64 MiB), has to be read back first. rollgym's tracers make time-ordered ids (the second
the trace began in the first 4 bytes: ``rollgym.telemetry.sampling``), which put new spans
near each other.

Two stores are grown side by side, chunk by chunk (``--chunk`` spans each, alternating), from
requests shaped like ``bench/ingest.py``'s (its encoder: 512 spans a request, ~10 a trace,
ids of a run starting 10,000 traces a second), written as the store's writer process writes
them (groups of 4 requests a transaction, a checkpoint every 8,192 spans). Only the writing
thread's CPU is timed (``time.thread_time``: other load moves it little); decoding is not
timed. Printed per stage of growth, and the ratio of the totals.

    python bench/trace_id_order.py [--spans 2000000] [--chunk 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ingest import encode_batches  # noqa: E402

from rollgym.tracestore.native import rows_from_protobuf  # noqa: E402
from rollgym.tracestore.store import TraceStore  # noqa: E402
from rollgym.tracestore.store_workers import WRITER_AUTOCHECKPOINT_PAGES  # noqa: E402
from rollgym.tracestore.writer import CHECKPOINT_EVERY_SPANS  # noqa: E402

GROUP = 4


def _grow(store: TraceStore, first_span: int, spans: int, random_ids: bool) -> float:
    """Write one chunk as the store's writer would; the writing thread's CPU seconds."""
    bodies = encode_batches(spans, 512, random_ids, first_span=first_span)
    batches = [rows_from_protobuf(body, store.resources) for body in bodies]
    spent = 0.0
    since_checkpoint = 0
    for index in range(0, len(batches), GROUP):
        group = batches[index : index + GROUP]
        start = time.thread_time()
        store.write_batches(group)
        since_checkpoint += sum(len(batch.spans) for batch in group)
        if since_checkpoint >= CHECKPOINT_EVERY_SPANS:
            since_checkpoint = 0
            store.checkpoint()
        spent += time.thread_time() - start
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2_000_000, help="spans in each store")
    parser.add_argument("--chunk", type=int, default=100_000)
    args = parser.parse_args()
    kinds = {"time-ordered": False, "random": True}
    totals = dict.fromkeys(kinds, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            kind: TraceStore(
                Path(tmp) / f"{kind}.db", autocheckpoint_pages=WRITER_AUTOCHECKPOINT_PAGES
            )
            for kind in kinds
        }
        written = 0
        while written < args.spans:
            chunk = min(args.chunk, args.spans - written)
            line = []
            for kind, random_ids in kinds.items():
                spent = _grow(stores[kind], written, chunk, random_ids)
                totals[kind] += spent
                line.append(f"{kind} {spent / chunk * 1e6:5.2f}")
            written += chunk
            print(f"spans {written:>10,}: writer CPU us a span: {', '.join(line)}", flush=True)
        sizes = {kind: (Path(tmp) / f"{kind}.db").stat().st_size >> 20 for kind in kinds}
        for store in stores.values():
            store.close()
    ordered, random_ = (totals[kind] / args.spans * 1e6 for kind in kinds)
    print(
        f"writer CPU per span over {args.spans:,} spans: time-ordered {ordered:.2f} us, random "
        f"{random_:.2f} us: ratio {ordered / random_:.2f} (database files {sizes} MiB)"
    )


if __name__ == "__main__":
    main()
