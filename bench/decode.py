"""Decode benchmark: the store's wire reader, compiled (mypyc) vs pure Python, same bodies.

Turns the requests ``bench/ingest.py`` sends (512 rollgym-shaped spans each) into store rows
with each reader in this one process, alternating rounds, and prints CPU per span (best of the
rounds) and the ratio. The compiled reader is the one ``pip install -e .`` builds
(``setup.py``); without it only the pure-Python figure is printed.

    python bench/decode.py [--spans 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).parent))
from ingest import encode_batches  # noqa: E402

from rollgym.tracestore import native, wire_rows  # noqa: E402
from rollgym.tracestore.store import SCHEMA, ResourceRegistry  # noqa: E402


def _cpu_per_span(reader: ModuleType, bodies: list[bytes], spans: int) -> float:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    registry = ResourceRegistry(conn)
    start = time.thread_time()
    for body in bodies:
        reader.rows_from_protobuf(body, registry)
    return (time.thread_time() - start) / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bodies = encode_batches(args.spans, 512)
    spans = len(bodies) * 512
    readers = {"pure Python": wire_rows}
    compiled = native.compiled_readers()
    if compiled is not None:
        readers["compiled"] = compiled[1]
    best = {name: float("inf") for name in readers}
    for _ in range(args.rounds):
        for name, reader in readers.items():
            best[name] = min(best[name], _cpu_per_span(reader, bodies, spans))
    for name, us in best.items():
        print(f"{name:>12}: {us:.2f} us of CPU a span (best of {args.rounds} rounds)")
    if compiled is None:
        print("compiled reader: not built (pip install -e . builds it with mypyc)")
    else:
        print(f"compiled / pure Python: {best['compiled'] / best['pure Python']:.2f}")


if __name__ == "__main__":
    main()
