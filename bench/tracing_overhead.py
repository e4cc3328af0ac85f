"""Driver throughput with full tracing exported over OTLP versus tracing off, side by side.

The same Collector posts the same rows to the same minimal loopback agent (a separate process,
``_minimal_agent.py``) at concurrency 64. "traced" rounds set telemetry up in this process with
every span group on and the OTLP/HTTP exporter pointed at the rollgym trace store (a separate
process: ``rollgym.tracestore.store_process.start_trace_store``), exactly as ``rollgym run`` does;
"off" rounds close the gate. Rounds are interleaved (off, traced, off, traced, ...) so drift of
a shared machine affects both. The export backlog is flushed after each traced round's clock
stops, and its spans counted: exported + dropped must equal what the round produced.

Each round runs four ways: tracing off, traced through rollgym's span pipeline as a run uses
it (``process``: records shipped to an exporter child that posts them as span records to the
run's own store), the same child posting OTLP instead (``process-otlp``: what it sends every
other backend, and the fallback ``ROLLGYM_STORE_OTLP=1``), and traced
through the same provider with the in-process exporter side (``in-process``: the records
turned into ``ReadableSpan`` s for the SDK's OTLP/HTTP exporter on a thread of the driver, what
a process whose child cannot start does, and what gRPC and the console use).
Prints the rates, each traced/off ratio (target >= 0.7, goal 0.9), the driver's CPU per
rollout, its garbage collections (count and collector time, ``gc.callbacks``), the CPU per
rollout of the other processes (the agent, the span exporter child, the trace store: on a
2-core machine they share the core the driver does not use; the store's split into its event
loop, decoders and writer), the CPU per span of all of them
(traced minus off, divided by the two spans a rollout makes) and the span counts.

``--equal-load`` adds rounds of tracing off and ``process`` offered the same rate (rows
released at a fixed pace: 80% of the slowest traced median), so both do the same work per
second and no process's CPU a rollout moves with the throughput itself. Unpaced, a slower
driver makes the agent serve fewer requests a wake-up (its CPU a rollout rises though it
records nothing); paced, the difference is the spans' own work at that rate (the store then
commits smaller batches than at full speed, which costs it more a span).

``--busy-driver US`` adds rounds with tracing off and the driver made slower by a plain busy
loop of ``US`` µs of CPU a rollout (no span): what being slower alone does to every
process's CPU a rollout, to read the unpaced figures against.

    python bench/tracing_overhead.py [--quick] [-n 10000] [--rounds 4] [--child-only]
                                     [--equal-load] [--busy-driver US]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import (
    Collector,  # noqa: E402
    event_loop,  # noqa: E402
)
from rollgym.telemetry.groups import ALL_GROUPS, configure_gate  # noqa: E402
from rollgym.telemetry.pipeline.build import STORE_OTLP_ENV  # noqa: E402
from rollgym.telemetry.pipeline.exporter_process import CHILD_MODULE  # noqa: E402
from rollgym.telemetry.pipeline.shipper import SpanShipper  # noqa: E402
from rollgym.telemetry.settings import TelemetrySettings  # noqa: E402
from rollgym.telemetry.setup import setup_telemetry  # noqa: E402
from rollgym.tracestore.store_process import start_trace_store  # noqa: E402
from rollgym.tracestore.store_workers import DECODER_NAME, WRITER_NAME  # noqa: E402

CONCURRENCY = 64
#: Spans a traced rollout makes in the driver: its dispatch span and its HTTP client span.
SPANS_PER_ROLLOUT = 2


#: CPU seconds this process spent per rollout in the last ``collect`` (all its threads): on a
#: shared machine the wall-clock rate moves with other load, the CPU a rollout costs much less.
last_cpu_per_rollout: list[float] = [0.0]
#: Garbage collections during the last ``collect`` and the seconds they took (``gc.callbacks``):
#: the span pipeline raises the young threshold while it records (``pipeline.young_gc``), and
#: this shows what that buys rather than assuming it.
last_gc: list[float] = [0, 0.0]


class _OtherProcesses:
    """CPU seconds (user + system) of the agent and the trace store (its own process plus its
    decoder and writer processes, which do most of its work), and of a round's span exporter
    child, per rollout of the round: where the traced rounds' extra work lands besides the
    driver."""

    def __init__(self, agent_pid: int, store_pid: int) -> None:
        self.agent = psutil.Process(agent_pid)
        self.store = psutil.Process(store_pid)
        self._began = (0.0, 0.0)
        #: The store's CPU of the last round by process: loop, decoders, writer (seconds).
        self.store_parts: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self._store_began = (0.0, 0.0, 0.0)

    @staticmethod
    def cpu(process: psutil.Process) -> float:
        times = process.cpu_times()
        return float(times.user + times.system)

    def _store_cpu(self) -> tuple[float, float, float]:
        """(the store's own process, its decoders, its writer): CPU seconds so far."""
        decoders = writer = 0.0
        for child in self.store.children(recursive=True):
            try:
                name, seconds = child.name(), self.cpu(child)
            except psutil.Error:  # a worker that ended meanwhile
                continue
            if name == WRITER_NAME:
                writer += seconds
            elif name == DECODER_NAME:
                decoders += seconds
        return self.cpu(self.store), decoders, writer

    def start(self) -> None:
        self._store_began = self._store_cpu()
        self._began = (self.cpu(self.agent), sum(self._store_began))

    def per_rollout(self, n: int, child_s: float) -> tuple[float, float, float]:
        """(agent, exporter child, store with its workers) seconds per rollout since
        :meth:`start`."""
        agent = (self.cpu(self.agent) - self._began[0]) / n
        now = self._store_cpu()
        self.store_parts = (
            (now[0] - self._store_began[0]) / n,
            (now[1] - self._store_began[1]) / n,
            (now[2] - self._store_began[2]) / n,
        )
        store = (sum(now) - self._began[1]) / n
        return agent, child_s / n, store


class _CollectorClock:
    """Counts and times every garbage collection between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.collections = 0
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.collections += 1
            self.seconds += time.perf_counter() - self._began

    def __enter__(self) -> _CollectorClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


async def paced_rows(n: int, rate: float) -> AsyncIterator[dict[str, int]]:
    """``n`` rows released at ``rate`` a second (in bursts of at least a millisecond, so the
    pacing's timers cost both sides of a comparison alike and little)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(n):
        ahead = start + i / rate - loop.time()
        if ahead > 0.001:
            await asyncio.sleep(ahead)
        yield {"q": i}


def busy(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU doing nothing else."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def collect(url: str, n: int, rate: float | None = None, busy_s: float = 0.0) -> float:
    """Rollouts per second of ``n`` rows through the Collector (rows, admission, dispatch);
    ``rate``: rows offered at that pace instead of as fast as the Collector takes them;
    ``busy_s``: CPU spent on the event loop for each outcome, as a slower driver would."""
    rows: Iterable[dict[str, int]] | AsyncIterator[dict[str, int]] = (
        ({"q": i} for i in range(n)) if rate is None else paced_rows(n, rate)
    )
    async with Collector({"agent": url}, agent="agent", concurrency=CONCURRENCY) as collector:
        with _CollectorClock() as clock:
            start = time.perf_counter()
            cpu = time.process_time()
            done = 0
            async for outcome in collector.stream(rows):
                assert outcome.reward == 1  # type: ignore[union-attr]
                done += 1
                if busy_s:
                    busy(busy_s)
            elapsed = time.perf_counter() - start
            last_cpu_per_rollout[0] = (time.process_time() - cpu) / n
        last_gc[0], last_gc[1] = clock.collections / n, clock.seconds / n
    assert done == n
    return n / elapsed


async def traced_round(
    url: str, n: int, endpoint: str, pipeline: str, rate: float | None = None
) -> tuple[float, dict[str, int], float]:
    """One traced round; ``pipeline`` is ``process`` (the exporter child, what a run uses) or
    ``in-process`` (the SDK's OTLP/HTTP exporter fed in this process). Also returns the CPU
    seconds its exporter child spent (0 without one), read once the backlog is flushed and
    before shutdown ends the child."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    settings = TelemetrySettings(
        groups=ALL_GROUPS,
        traces_exporter="otlp",
        endpoint=endpoint,
        run_id="bench",
        to_local_store=True,  # as ``rollgym run``'s processes: the run's own store
    )
    exporter = None if pipeline.startswith("process") else OTLPSpanExporter(f"{endpoint}/v1/traces")
    # ``process-otlp``: the same child, posting OTLP to the store (the fallback) instead of
    # the span records it posts to the run's own store by default
    os.environ[STORE_OTLP_ENV] = "1" if pipeline == "process-otlp" else "0"
    try:
        handle = setup_telemetry(
            settings, service_name="rollgym-bench", run_id="bench", span_exporter=exporter
        )
    finally:
        os.environ.pop(STORE_OTLP_ENV, None)
    child_s = 0.0
    try:
        shipper = handle.processor
        if isinstance(shipper, SpanShipper):
            child_starts.append(_how_started(shipper.child_pid))
        achieved = await collect(url, n, rate)
        if shipper is not None:
            await _on_own_thread(shipper.flush, 30.0)
        if isinstance(shipper, SpanShipper):
            child_s = _OtherProcesses.cpu(psutil.Process(shipper.child_pid))
    finally:
        await _on_own_thread(handle.shutdown, 30.0)
    return achieved, handle.counts(), child_s


#: How each traced round's exporter child started: ``forked`` (as ``rollgym run``'s driver
#: starts it, one thread running) or ``spawned`` (a new interpreter: threads were running).
child_starts: list[str] = []


def _how_started(pid: int) -> str:
    spawned = CHILD_MODULE in " ".join(psutil.Process(pid).cmdline())
    return "spawned" if spawned else "forked"


async def _on_own_thread(call: Callable[[float], object], limit_s: float) -> None:
    """``call(limit_s)`` on a thread that ends with it. Not ``asyncio.to_thread``: the default
    executor's threads stay, and with a second thread running the next round's exporter child
    would be spawned (a new interpreter, about 0.1 s of CPU on the other core) where the
    driver of ``rollgym run``, one thread running, forks it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            call(limit_s)
        finally:
            loop.call_soon_threadsafe(done.set_result, None)

    thread = threading.Thread(target=run, name="bench-flush")
    thread.start()
    await done
    thread.join()


async def measure(
    url: str,
    n: int,
    rounds: int,
    endpoint: str,
    pipelines: tuple[str, ...],
    others: _OtherProcesses,
) -> dict[str, list]:
    configure_gate((), tracing_active=False)
    await collect(url, min(n, 2000))  # warm up every path
    for pipeline in pipelines:
        await traced_round(url, min(n, 2000), endpoint, pipeline)
    out: dict[str, list] = {"off": [], "cpu off": [], "gc off": [], "others off": []}
    for pipeline in pipelines:
        out[pipeline] = []
        out[f"counts {pipeline}"] = []
        out[f"cpu {pipeline}"] = []
        out[f"gc {pipeline}"] = []
        out[f"others {pipeline}"] = []
        out[f"store parts {pipeline}"] = []
    for _ in range(rounds):
        configure_gate((), tracing_active=False)
        others.start()
        out["off"].append(await collect(url, n))
        out["others off"].append(others.per_rollout(n, 0.0))
        out["cpu off"].append(last_cpu_per_rollout[0])
        out["gc off"].append(tuple(last_gc))
        for pipeline in pipelines:
            others.start()
            rate, counts, child_s = await traced_round(url, n, endpoint, pipeline)
            out[f"others {pipeline}"].append(others.per_rollout(n, child_s))
            out[f"store parts {pipeline}"].append(others.store_parts)
            out[pipeline].append(rate)
            out[f"cpu {pipeline}"].append(last_cpu_per_rollout[0])
            out[f"gc {pipeline}"].append(tuple(last_gc))
            out[f"counts {pipeline}"].append(counts)
    return out


async def measure_equal_load(
    url: str, n: int, rounds: int, endpoint: str, others: _OtherProcesses, rate: float
) -> dict[str, list]:
    """Interleaved rounds of tracing off and ``process`` with ``n`` rows offered at ``rate``:
    per round, (achieved rate, this process's CPU a rollout, the others' per rollout)."""
    out: dict[str, list] = {"off": [], "process": []}
    for _ in range(rounds):
        configure_gate((), tracing_active=False)
        others.start()
        achieved = await collect(url, n, rate)
        out["off"].append((achieved, last_cpu_per_rollout[0], others.per_rollout(n, 0.0)))
        others.start()
        achieved, _, child_s = await traced_round(url, n, endpoint, "process", rate)
        out["process"].append((achieved, last_cpu_per_rollout[0], others.per_rollout(n, child_s)))
    return out


async def measure_busy(
    url: str, n: int, rounds: int, others: _OtherProcesses, busy_s: float
) -> dict[str, list]:
    """Interleaved rounds with tracing off, the driver as is and ``busy_s`` slower a rollout:
    per round, (rate, this process's CPU a rollout, the others' per rollout)."""
    configure_gate((), tracing_active=False)
    out: dict[str, list] = {"as is": [], "busy": []}
    for _ in range(rounds):
        for way, extra in (("as is", 0.0), ("busy", busy_s)):
            others.start()
            rate = await collect(url, n, busy_s=extra)
            out[way].append((rate, last_cpu_per_rollout[0], others.per_rollout(n, 0.0)))
    return out


def print_busy(result: dict[str, list], busy_s: float) -> None:
    """What a driver slower by ``busy_s`` a rollout, and nothing else, costs every process."""
    print(f"tracing off, the driver busy {busy_s * 1e6:.0f} us more a rollout (no span):")
    totals = {}
    for way in ("as is", "busy"):
        rounds = result[way]
        rate = statistics.median(r[0] for r in rounds)
        driver = statistics.median(r[1] for r in rounds)
        agent = statistics.median(r[2][0] for r in rounds)
        totals[way] = driver + agent
        print(
            f"  {way:8} {rate:,.0f} /s; CPU a rollout: driver {driver * 1e6:.1f} us, "
            f"agent {agent * 1e6:.1f}"
        )
    added = totals["busy"] - totals["as is"]
    print(
        f"  CPU added a rollout, both processes: {added * 1e6:.1f} us for {busy_s * 1e6:.0f} us "
        f"of work ({added / busy_s:.1f}x)"
    )


def print_equal_load(result: dict[str, list], rate: float) -> None:
    """The equal-load rounds: CPU a rollout by process, and CPU a span traced minus off."""
    print(f"equal load: both ways offered {rate:,.0f} rollouts/s")
    totals = {}
    for way in ("off", "process"):
        rounds = result[way]
        achieved = " ".join(f"{r[0]:,.0f}" for r in rounds)
        driver = statistics.median(r[1] for r in rounds)
        agent, child, store = (statistics.median(r[2][i] for r in rounds) for i in range(3))
        totals[way] = driver + agent + child + store
        print(
            f"  {way:8} achieved {achieved} /s; CPU a rollout: driver {driver * 1e6:.1f} us, "
            f"agent {agent * 1e6:.1f}, span exporter child {child * 1e6:.1f}, "
            f"trace store {store * 1e6:.1f}"
        )
    per_span = (totals["process"] - totals["off"]) / SPANS_PER_ROLLOUT
    print(
        f"  CPU per span at equal load, all processes (traced minus off): "
        f"{per_span * 1e6:.1f} us (goal <= 10 us)"
    )


def child_start_up_s(endpoint: str, spawned: bool) -> float:
    """CPU seconds one span exporter child spends starting (imports, config; with ``spawned``
    a new interpreter too), read once it has sat idle for a second: the part of a round's
    child CPU that a run pays once per process, not per rollout. ``spawned``: a second thread
    runs meanwhile, so the child is spawned, not forked."""
    done = threading.Event()
    if spawned:
        threading.Thread(target=done.wait, daemon=True).start()
    try:
        shipper = SpanShipper(url=f"{endpoint}/v1/traces", headers=None, resource={}, timeout_s=5.0)
    finally:
        done.set()
    try:
        time.sleep(1.5)
        return _OtherProcesses.cpu(psutil.Process(shipper.child_pid))
    finally:
        shipper.shutdown(5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3,000 rollouts x 3 rounds")
    parser.add_argument("-n", type=int, default=10_000, help="rollouts per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--child-only", action="store_true", help="skip the in-process exporter rounds"
    )
    parser.add_argument(
        "--equal-load",
        action="store_true",
        help="also run tracing off and on offered the same rate (see the module docstring)",
    )
    parser.add_argument(
        "--busy-driver",
        type=float,
        default=0.0,
        metavar="US",
        help="also run tracing off with the driver busy US µs more a rollout",
    )
    args = parser.parse_args()
    n, rounds = (3_000, 3) if args.quick else (args.n, args.rounds)
    pipelines: tuple[str, ...] = ("process", "process-otlp")
    if not args.child_only:
        pipelines += ("in-process",)
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "tracestore.log")
        try:
            with AgentProcess() as agent:
                others = _OtherProcesses(agent.proc.pid, store.process.pid)
                result = event_loop.run(
                    measure(agent.url, n, rounds, store.endpoint, pipelines, others)
                )
                if args.equal_load:
                    pace = 0.8 * min(statistics.median(result[way]) for way in pipelines)
                    equal = event_loop.run(
                        measure_equal_load(agent.url, n, rounds, store.endpoint, others, pace)
                    )
                busy_s = args.busy_driver / 1e6
                if busy_s:
                    slowed = event_loop.run(measure_busy(agent.url, n, rounds, others, busy_s))
                start_up_s = {
                    way: child_start_up_s(store.endpoint, way == "spawned")
                    for way in ("forked", "spawned")
                }
        finally:
            store.stop()
    off = result["off"]
    print(f"rollouts per round: {n}, concurrency {CONCURRENCY}, {rounds} rounds (interleaved)")
    print("traced: every span group on, OTLP/HTTP to the rollgym trace store (own process)")
    print(f"tracing off:     {_rates(off)}")
    cpu_off = statistics.median(result["cpu off"])
    print(f"  driver CPU per rollout (all threads): {cpu_off * 1e6:.1f} us")
    print(f"  {_collections(result['gc off'])}")
    print(f"  {_others(result['others off'])}")
    others_off = sum(statistics.median(r[i] for r in result["others off"]) for i in range(3))
    for pipeline in pipelines:
        traced = result[pipeline]
        pairwise = [t / o for t, o in zip(traced, off, strict=True)]
        print(f"traced ({pipeline + '):':14} {_rates(traced)}")
        print(
            f"  ratio traced/off: {statistics.median(traced) / statistics.median(off):.2f} of "
            f"medians, {statistics.median(pairwise):.2f} median of adjacent pairs "
            f"(range {min(pairwise):.2f}-{max(pairwise):.2f}; target >= 0.70, goal 0.90)"
        )
        cpu = statistics.median(result[f"cpu {pipeline}"])
        print(
            f"  driver CPU per rollout (all threads): {cpu * 1e6:.1f} us; "
            f"CPU ratio off/traced {cpu_off / cpu:.2f}"
        )
        print(f"  {_collections(result[f'gc {pipeline}'])}")
        print(f"  {_others(result[f'others {pipeline}'])}")
        loop, decoders, writer = (
            statistics.median(r[i] for r in result[f"store parts {pipeline}"]) * 1e6
            for i in range(3)
        )
        print(
            f"    of the trace store's: its event loop {loop:.1f} us, decoders {decoders:.1f} us, "
            f"writer {writer:.1f} us"
        )
        others = sum(
            statistics.median(r[i] for r in result[f"others {pipeline}"]) for i in range(3)
        )
        per_span = (cpu + others - cpu_off - others_off) / SPANS_PER_ROLLOUT
        print(
            f"  CPU per span, all processes (traced minus off, {SPANS_PER_ROLLOUT} spans a "
            f"rollout): {per_span * 1e6:.1f} us (goal <= 10 us)"
        )
        counts = result[f"counts {pipeline}"]
        exported = sum(c["spans_exported"] for c in counts)
        dropped = sum(c["spans_dropped"] for c in counts)
        print(
            f"  spans: {exported:,} exported, {dropped:,} dropped "
            f"({SPANS_PER_ROLLOUT * n * rounds:,} produced: dispatch + HTTP client span per rollout)"
        )
    started = ", ".join(f"{child_starts.count(way)} {way}" for way in ("forked", "spawned"))
    print(f"  the rounds' span exporter children: {started} (rollgym run's driver forks its own)")
    for way, seconds in start_up_s.items():
        print(
            f"  of the span exporter child's CPU, its start-up {way} (once per process): "
            f"{seconds:.2f} s, {seconds / n * 1e6:.1f} us a rollout of a {n}-rollout round"
        )
    if args.equal_load:
        print_equal_load(equal, pace)
    if busy_s:
        print_busy(slowed, busy_s)


def _collections(rounds: list[tuple[float, float]]) -> str:
    per_1000 = statistics.median(c for c, _ in rounds) * 1000
    seconds = statistics.median(s for _, s in rounds)
    return (
        f"garbage collections per 1,000 rollouts: {per_1000:.1f}, "
        f"collector time per rollout {seconds * 1e6:.1f} us"
    )


def _others(rounds: list[tuple[float, float, float]]) -> str:
    agent, child, store = (statistics.median(r[i] for r in rounds) * 1e6 for i in range(3))
    return (
        f"other processes' CPU per rollout: agent {agent:.1f} us, span exporter child "
        f"{child:.1f} us, trace store {store:.1f} us"
    )


def _rates(rates: list[float]) -> str:
    listed = " ".join(f"{x:,.0f}" for x in rates)
    return f"{listed} /s (median {statistics.median(rates):,.0f})"


if __name__ == "__main__":
    main()
