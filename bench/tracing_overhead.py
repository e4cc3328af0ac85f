"""Driver throughput with full tracing exported over OTLP versus tracing off, side by side.

The same Collector posts the same rows to the same minimal loopback agent (a separate process,
``_minimal_agent.py``) at concurrency 64. "traced" rounds set telemetry up in this process with
every span group on and the OTLP/HTTP exporter pointed at the rollgym trace store (a separate
process: ``rollgym.tracestore.launch.start_trace_store``), exactly as ``rollgym run`` does;
"off" rounds close the gate. Rounds are interleaved (off, traced, off, traced, ...) so drift of
a shared machine affects both. The export backlog is flushed after each traced round's clock
stops, and its spans counted: exported + dropped must equal what the round produced.

Prints both rates, the ratio traced / off (target >= 0.9) and the span counts.

    python bench/tracing_overhead.py [--quick] [-n 10000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import (
    Collector,  # noqa: E402
    event_loop,  # noqa: E402
)
from rollgym.telemetry.groups import ALL_GROUPS, configure_gate  # noqa: E402
from rollgym.telemetry.settings import TelemetrySettings  # noqa: E402
from rollgym.telemetry.setup import setup_telemetry  # noqa: E402
from rollgym.tracestore.launch import start_trace_store  # noqa: E402

CONCURRENCY = 64


async def collect(url: str, n: int) -> float:
    """Rollouts per second of ``n`` rows through the Collector (rows, admission, dispatch)."""
    async with Collector({"agent": url}, agent="agent", concurrency=CONCURRENCY) as collector:
        start = time.perf_counter()
        done = 0
        async for outcome in collector.stream({"q": i} for i in range(n)):
            assert outcome.reward == 1  # type: ignore[union-attr]
            done += 1
        elapsed = time.perf_counter() - start
    assert done == n
    return n / elapsed


async def traced_round(url: str, n: int, endpoint: str) -> tuple[float, dict[str, int]]:
    settings = TelemetrySettings(
        groups=ALL_GROUPS, traces_exporter="otlp", endpoint=endpoint, run_id="bench"
    )
    handle = setup_telemetry(settings, service_name="rollgym-bench", run_id="bench")
    try:
        rate = await collect(url, n)
    finally:
        await asyncio.to_thread(handle.shutdown, 30.0)
    return rate, handle.counts()


async def measure(url: str, n: int, rounds: int, endpoint: str) -> dict[str, list]:
    configure_gate((), tracing_active=False)
    await collect(url, min(n, 2000))  # warm up both paths
    await traced_round(url, min(n, 2000), endpoint)
    out: dict[str, list] = {"off": [], "traced": [], "counts": []}
    for _ in range(rounds):
        configure_gate((), tracing_active=False)
        out["off"].append(await collect(url, n))
        rate, counts = await traced_round(url, n, endpoint)
        out["traced"].append(rate)
        out["counts"].append(counts)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3,000 rollouts x 3 rounds")
    parser.add_argument("-n", type=int, default=10_000, help="rollouts per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    n, rounds = (3_000, 3) if args.quick else (args.n, args.rounds)
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "tracestore.log")
        try:
            with AgentProcess() as agent:
                result = event_loop.run(measure(agent.url, n, rounds, store.endpoint))
        finally:
            store.stop()
    off, traced = result["off"], result["traced"]
    pairwise = [t / o for t, o in zip(traced, off, strict=True)]
    exported = sum(c["spans_exported"] for c in result["counts"])
    dropped = sum(c["spans_dropped"] for c in result["counts"])
    print(f"rollouts per round: {n}, concurrency {CONCURRENCY}, {rounds} rounds (interleaved)")
    print("traced: every span group on, OTLP/HTTP to the rollgym trace store (own process)")
    print(
        f"tracing off: {' '.join(f'{x:,.0f}' for x in off)} /s (median {statistics.median(off):,.0f})"
    )
    print(
        f"traced:      {' '.join(f'{x:,.0f}' for x in traced)} /s "
        f"(median {statistics.median(traced):,.0f})"
    )
    print(
        f"ratio traced/off: {statistics.median(traced) / statistics.median(off):.2f} of medians, "
        f"{statistics.median(pairwise):.2f} median of adjacent pairs (target >= 0.90)"
    )
    print(
        f"spans (traced rounds): {exported:,} exported, {dropped:,} dropped "
        f"({2 * n * rounds:,} produced: dispatch + HTTP client span per rollout)"
    )


if __name__ == "__main__":
    main()
