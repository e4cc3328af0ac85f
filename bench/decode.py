"""Decode benchmark: the store's two readers, compiled (mypyc) vs pure Python, same bodies.

Turns bodies into store rows with each reader in this one process, alternating rounds, and
prints CPU per span (best of the rounds) and the ratio: the OTLP reader on the requests
``bench/ingest.py`` sends (512 rollgym-shaped spans each), and the span-records reader on
the bodies the run's own exporter children post (the driver's two spans a rollout, as in
``bench/store_path_cpu.py``, 512 a body). The compiled readers are the ones
``pip install -e .`` builds (``setup.py``); without them only the pure-Python figures are
printed.

    python bench/decode.py [--spans 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import marshal
import sqlite3
import sys
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).parent))
from ingest import encode_batches  # noqa: E402
from store_path_cpu import RESOURCE, rollout  # noqa: E402

from rollgym.telemetry.pipeline.frames import frame_records, pack_batch, pack_records  # noqa: E402
from rollgym.tracestore import native, record_rows, wire_rows  # noqa: E402
from rollgym.tracestore.store import SCHEMA, ResourceRegistry  # noqa: E402


def _records_bodies(spans: int, per_body: int) -> list[bytes]:
    resource = marshal.dumps(RESOURCE)
    records = [record for n in range(spans // 2) for record in rollout(n)]
    return [
        pack_records(resource, frame_records(pack_batch(records[at : at + per_body])))
        for at in range(0, len(records), per_body)
    ]


def _cpu_per_span(read: str, reader: ModuleType, bodies: list[bytes], spans: int) -> float:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    registry = ResourceRegistry(conn)
    rows_of = getattr(reader, read)
    start = time.thread_time()
    for body in bodies:
        rows_of(body, registry)
    return (time.thread_time() - start) / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    compiled = native.compiled_readers()
    otlp = encode_batches(args.spans, 512)
    records = _records_bodies(len(otlp) * 512, 512)
    for title, read, bodies, pure, built in [
        ("OTLP reader", "rows_from_protobuf", otlp, wire_rows, compiled and compiled[1]),
        ("records reader", "rows_from_records", records, record_rows, compiled and compiled[2]),
    ]:
        readers = {"pure Python": pure, **({"compiled": built} if built else {})}
        spans = len(bodies) * 512
        best = {name: float("inf") for name in readers}
        for _ in range(args.rounds):
            for name, reader in readers.items():
                best[name] = min(best[name], _cpu_per_span(read, reader, bodies, spans))
        print(title)
        for name, us in best.items():
            print(f"{name:>14}: {us:.2f} us of CPU a span (best of {args.rounds} rounds)")
        if "compiled" in best:
            print(f"  compiled / pure Python: {best['compiled'] / best['pure Python']:.2f}")
    if compiled is None:
        print("compiled readers: not built (pip install -e . builds them with mypyc)")


if __name__ == "__main__":
    main()
