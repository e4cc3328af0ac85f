"""CPU a span costs from the recording process's shipper to rows committed, per process, for
the two ways a span record reaches the run's own trace store: as span records (the default)
and as OTLP (``ROLLGYM_STORE_OTLP=1``, and what every other backend gets).

No driver and no HTTP traffic of rollouts: a real trace store process and a real exporter
child, fed by this process through :class:`~rollgym.telemetry.pipeline.shipper.SpanShipper`
with records shaped like the driver's (a dispatch span with its link and rollout attributes,
an HTTP client span). Prints, per way, the CPU per span of the exporter child, of the store's
own process (event loop and its threads), of its decoder and of its writer process, read with
``psutil`` before and after (10 ms ticks: use enough spans).

    python bench/store_path_cpu.py [-n 30000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from rollgym.telemetry import names
from rollgym.telemetry.pipeline.shipper import SpanShipper
from rollgym.tracestore.store_process import start_trace_store
from rollgym.tracestore.store_workers import DECODER_NAME, WRITER_NAME

RESOURCE = {"service.name": "rollgym-driver", names.RUN_ID: "bench", "process.pid": 1}
SCOPE = ("rollgym", None, None)


def rollout(n: int) -> list[tuple[Any, ...]]:
    """The two records a traced rollout makes in the driver."""
    dispatch = {
        names.ROLLOUT_ID: f"r{n}",
        names.DISPATCH_NAME: "agent",
        names.ROLLOUT_ATTEMPT: 0,
        names.ROLLOUT_OUTCOME: "ok",
        names.ROLLOUT_REWARD: 1.0,
    }
    client = {
        "http.request.method": "POST",
        "url.full": "http://127.0.0.1:8000/rollout",
        "server.address": "127.0.0.1",
        "server.port": 8000,
        "http.response.status_code": 200,
    }
    trace, start = (7 << 64) + n, time.time_ns()
    link = [(9 << 64, 5, False, None)]
    return [
        (trace, 1 + 2 * n, 0, False, names.SPAN_DISPATCH, 0, start, start + 9, dispatch, None,
         link, 1, None, SCOPE, None),
        (trace, 2 + 2 * n, 1 + 2 * n, False, "POST", 2, start, start + 8, client, None, None, 0,
         None, SCOPE, None),
    ]  # fmt: skip


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def by_process(store: psutil.Process, child: psutil.Process) -> dict[str, float]:
    out = {"exporter child": cpu(child), "store process": cpu(store), "decoders": 0.0}
    out["writer"] = 0.0
    for worker in store.children(recursive=True):
        name = worker.name()
        key = "writer" if name == WRITER_NAME else "decoders" if name == DECODER_NAME else None
        if key is not None:
            out[key] += cpu(worker)
    return out


def measure(n: int, as_records: bool, folder: Path) -> dict[str, float]:
    store = start_trace_store(folder / "traces.db", folder / "store.log")
    try:
        shipper = SpanShipper(
            url=f"{store.endpoint}/v1/traces",
            headers=None,
            resource=RESOURCE,
            timeout_s=10.0,
            patience_s=30.0,
            idempotent=True,
            records=as_records,
        )
        try:
            for i in range(2000):  # warm up: workers started, caches filled
                for record in rollout(i):
                    shipper.on_end(record)
            shipper.flush(60.0)
            processes = (psutil.Process(store.process.pid), psutil.Process(shipper.child_pid))
            before = by_process(*processes)
            for i in range(n):
                for record in rollout(10_000_000 + i):
                    shipper.on_end(record)
                if i % 2000 == 0:
                    time.sleep(0.02)  # about a run's pace: the queue never fills
            assert shipper.flush(120.0)
            time.sleep(0.5)
            after = by_process(*processes)
            counts = shipper.counts.snapshot()
        finally:
            shipper.shutdown(30.0)
    finally:
        store.stop()
    spans = 2 * n
    assert counts["spans_dropped"] == 0, counts
    return {key: (after[key] - before[key]) / spans * 1e6 for key in before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30_000, help="rollouts (two spans each) a way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        results = {
            way: measure(args.n, way == "records", Path(tmp) / way) for way in ("records", "otlp")
        }
    print(f"{2 * args.n:,} spans a way; CPU per span by process (µs)")
    keys = list(results["records"])
    print(f"{'':10}" + "".join(f"{key:>16}" for key in keys) + f"{'total':>10}")
    for way, figures in results.items():
        row = "".join(f"{figures[key]:16.2f}" for key in keys)
        print(f"{way:10}{row}{sum(figures.values()):10.2f}")


if __name__ == "__main__":
    main()
