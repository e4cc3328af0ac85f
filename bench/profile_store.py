"""Profile benchmark: ``rollgym traces profile`` of a 1,000,000-span store, against a plain scan.

The store is realistic, not hand-shaped: a synthetic run (``tests/synthetic_run.py``: four
processes' SDKs, every span name and split attribute a real run has) is exported through a
real trace store once, then its rows are copied with fresh trace and span ids (parent links
kept) and shifted in time until the store holds ``--spans`` spans. Then, on one fresh
read-only connection each, side by side:

* a plain scan: every span row read once in trace-id order, the least any one-pass profile
  can cost;
* the profile itself (``profile_store``: phases, per dispatch name, stragglers, timeline), in
  one process, then split over two (``workers=2``: two trace-id ranges read side by side).

Prints wall and CPU seconds (the CPU of the worker process included) and their ratios, and
whether the two answers are identical. Target: the profile under 10 s. On a shared machine
wall time mostly waits for a core; the CPU of the busiest process is what an idle machine's
wall time would be.

    python bench/profile_store.py [--spans 1000000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import apsw
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rollgym.reading.profile import profile_store
from rollgym.tracestore.store import INSERT_DISPATCH, INSERT_RESOURCE, INSERT_SPAN, TraceStore
from rollgym.tracestore.store_process import start_trace_store

# the test suite's synthetic run: one fixture for the tests and this bench, not a copy
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_run import emit_run  # noqa: E402

TARGET_S = 10.0
TEMPLATE_ROLLOUTS = 400


def template(directory: Path) -> Path:
    """A synthetic run exported through a real store process."""
    db = directory / "template.db"
    process = start_trace_store(db, directory / "store.log")
    try:
        emit_run(
            lambda: OTLPSpanExporter(endpoint=process.traces_endpoint),
            rollouts=TEMPLATE_ROLLOUTS,
            turns=3,
        )
    finally:
        process.stop()
    return db


def _remap(value: bytes | None, copy: int) -> bytes | None:
    """A span or trace id made unique to ``copy``, the same for a span and its children."""
    if value is None:
        return None
    tail = int.from_bytes(value[-4:], "big") ^ (copy * 2654435761 & 0xFFFFFFFF)
    return value[:-4] + tail.to_bytes(4, "big")


def _renamed(rollout_id: str | None, copy: int, distinct: bool) -> str | None:
    """A copy's rollout id: the same (``distinct`` false), or one of its own (``c3.12-0-a1``)."""
    return f"c{copy}.{rollout_id}" if distinct and rollout_id is not None else rollout_id


def build(source: Path, db: Path, total: int, *, distinct_rollouts: bool = False) -> int:
    """Copy ``source``'s dispatch traces until ``db`` holds ``total`` spans; returns spans.
    ``distinct_rollouts``: each copy's rollouts get ids of their own (else copies share them)."""
    TraceStore(db).close()  # the schema
    src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    spans = list(
        src.execute("SELECT * FROM spans WHERE trace_id IN (SELECT trace_id FROM dispatches)")
    )
    dispatches = list(src.execute("SELECT * FROM dispatches"))
    resources = list(src.execute("SELECT * FROM resources"))
    first = min(row[5] for row in spans)
    width = max(row[6] for row in spans) - first
    out = apsw.Connection(str(db))
    out.execute("PRAGMA journal_mode=WAL")
    out.execute("BEGIN")
    out.executemany(INSERT_RESOURCE, resources)
    written, copy = 0, 0
    while written < total:
        shift = copy * width // 2  # copies overlap in time, as concurrent rollouts do
        take = spans[: total - written]
        out.executemany(
            INSERT_SPAN,
            [
                (_remap(r[0], copy), _remap(r[1], copy), _remap(r[2], copy), *r[3:5])
                + (r[5] + shift, r[6] + shift, *r[7:11])
                + (_renamed(r[11], copy, distinct_rollouts), *r[12:])
                for r in take
            ],
        )
        out.executemany(
            INSERT_DISPATCH,
            [
                (
                    _remap(d[0], copy),
                    _remap(d[1], copy),
                    d[2],
                    _renamed(d[3], copy, distinct_rollouts),
                )
                + (*d[4:8], d[8] + shift, *d[9:])
                for d in dispatches
            ],
        )
        written += len(take)
        copy += 1
    out.execute("COMMIT")
    out.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out.close()
    return written


def scan(db: Path) -> tuple[float, float]:
    """Wall and CPU seconds to read every span row once, in trace-id order (one pass's floor)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    started, cpu = time.perf_counter(), time.process_time()
    for _row in conn.execute(
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, resource_id "
        "FROM spans ORDER BY trace_id"
    ):
        pass
    conn.close()
    return time.perf_counter() - started, time.process_time() - cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def profiled(db: Path, workers: int) -> tuple[float, float, float, dict]:
    """Wall seconds of the profile, CPU seconds of this process and of its workers (CPU too:
    on a shared machine wall time waits)."""
    started, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    report = profile_store(db, workers=workers)
    return (
        time.perf_counter() - started,
        time.process_time() - cpu,
        _children_cpu() - children,
        report,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        source = template(directory)
        db = directory / "traces.db"
        spans = build(source, db, args.spans)
        print(f"store: {spans} spans built in {time.perf_counter() - started:.1f} s")
        floor, floor_cpu = scan(db)
        print(f"plain scan of every span row: {floor:.2f} s wall, {floor_cpu:.2f} s CPU")
        reports = []
        for workers in (1, 2):
            seconds, cpu, worker_cpu, report = profiled(db, workers)
            reports.append(report)
            shares = sum(p["share"] for p in report["phases"])
            busiest = max(cpu, worker_cpu)
            print(
                f"profile, {workers} process(es): {seconds:.2f} s wall, {cpu:.2f} s CPU here "
                f"+ {worker_cpu:.2f} s in the worker; busiest process {busiest:.2f} s CPU "
                f"({busiest / floor_cpu:.1f}x the plain scan's CPU) for "
                f"{report['dispatches']} dispatches; shares sum to {shares:.12f}; "
                f"under {TARGET_S:.0f} s of the busiest process's CPU: "
                f"{'yes' if busiest < TARGET_S else 'NO'}"
            )
        print(f"one process and two give the same answer: {reports[0] == reports[1]}")


if __name__ == "__main__":
    main()
