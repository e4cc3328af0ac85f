"""What a span record costs the recording process while it waits in the shipper's queue.

One process runs the real Collector against the minimal loopback agent (``_minimal_agent.py``,
its own process) at concurrency 64, rounds interleaved, with every span group on and spans
going into rollgym's recording tracer, whose sink is:

- ``dropped``: a sink that discards each record as its span ends (the floor: recording only);
- ``kept as tuples``: records kept as they are until a batch of 512 is full, then let go
  (what the shipper's queue held before records were packed as their span ended);
- ``packed``: each record ``marshal`` ed as its span ends and the bytes kept until a batch
  is full (what the queue holds now, without the writer thread);
- ``shipper``: the real :class:`~rollgym.telemetry.pipeline.shipper.SpanShipper` exporting to
  a real trace store (its own process);

and ``off`` (tracing off). Prints the driver's CPU per rollout (``time.process_time``, all its
threads) and its garbage collections per round, medians over the rounds. CPU is the figure:
the wall rate follows whatever else the machine runs.

The young-generation threshold is raised as ``setup_telemetry`` raises it in every process a
run traces (:mod:`rollgym.telemetry.young_gc`); ``--no-gc-hold`` keeps CPython's default, to
see what queued records cost the collector without it.

    python bench/shipper_hot_path.py [-n 3000] [--rounds 5] [--no-gc-hold]
"""

from __future__ import annotations

import argparse
import gc
import marshal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import Collector, event_loop  # noqa: E402
from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE  # noqa: E402
from rollgym.telemetry import young_gc  # noqa: E402
from rollgym.telemetry._state import state  # noqa: E402
from rollgym.telemetry.groups import ALL_GROUPS, configure_gate  # noqa: E402
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider  # noqa: E402
from rollgym.telemetry.pipeline.shipper import SpanShipper  # noqa: E402
from rollgym.telemetry.sampling import TimeOrderedIdGenerator  # noqa: E402
from rollgym.tracestore.store_process import start_trace_store  # noqa: E402

CONCURRENCY = 64


def held_until_a_batch(convert: Callable[[Any], Any]) -> Callable[[Any], None]:
    """A sink keeping ``convert(record)`` until a batch is full, as a queue would."""
    held: list[Any] = []

    def sink(record: Any) -> None:
        held.append(convert(record))
        if len(held) >= SPAN_EXPORT_BATCH_SIZE:
            held.clear()

    return sink


async def collect(url: str, n: int) -> None:
    async with Collector({"agent": url}, agent="agent", concurrency=CONCURRENCY) as collector:
        async for _ in collector.stream({"q": i} for i in range(n)):
            pass


def collections() -> int:
    return sum(generation["collections"] for generation in gc.get_stats())


async def measure(url: str, sinks: dict[str, Any], n: int, rounds: int) -> dict[str, list]:
    tracers = {
        name: RecordingTracerProvider(sink, id_generator=TimeOrderedIdGenerator()).get_tracer(
            "rollgym"
        )
        for name, sink in sinks.items()
        if sink is not None
    }

    def use(name: str) -> None:
        if sinks[name] is None:
            configure_gate((), tracing_active=False)
        else:
            state.tracer = tracers[name]
            configure_gate(tuple(ALL_GROUPS), tracing_active=True)

    for name in sinks:  # every path warm before it is counted
        use(name)
        await collect(url, 300)
    out: dict[str, list] = {name: [] for name in sinks}
    for _ in range(rounds):
        for name in sinks:
            use(name)
            began, cpu = collections(), time.process_time()
            await collect(url, n)
            out[name].append(((time.process_time() - cpu) / n, collections() - began))
    configure_gate((), tracing_active=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3000, help="rollouts per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-gc-hold", action="store_true", help="keep CPython's young-generation threshold"
    )
    args = parser.parse_args()
    if not args.no_gc_hold:
        young_gc.hold()
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "store.log")
        shipper = SpanShipper(
            url=f"{store.endpoint}/v1/traces", headers=None, resource={}, timeout_s=10.0
        )
        sinks: dict[str, Any] = {
            "off": None,
            "dropped": lambda record: None,
            "kept as tuples": held_until_a_batch(lambda record: record),
            "packed": held_until_a_batch(marshal.dumps),
            "shipper": shipper.on_end,
        }
        try:
            with AgentProcess() as agent:
                result = event_loop.run(measure(agent.url, sinks, args.n, args.rounds))
        finally:
            shipper.shutdown(30.0)
            store.stop()
    print(f"{args.n} rollouts a round, {args.rounds} rounds interleaved, concurrency {CONCURRENCY}")
    print(f"young-generation GC threshold: {gc.get_threshold()[0]}")
    print(f"{'sink':16s} {'driver CPU a rollout':>21s} {'collections a round':>20s}")
    for name, rounds in result.items():
        cpu = statistics.median(r[0] for r in rounds) * 1e6
        count = statistics.median(r[1] for r in rounds)
        print(f"{name:16s} {cpu:18.1f} us {count:20.0f}")
    counts = shipper.counts.snapshot()
    print(f"shipper: {counts['spans_exported']:,} exported, {counts['spans_dropped']:,} dropped")


if __name__ == "__main__":
    main()
