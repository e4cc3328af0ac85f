"""Where the driver's CPU per rollout goes: a bare aiohttp loop, the untraced driver and the
traced driver on the same loopback agent, each under cProfile, by stage.

The workload is ``bench/tracing_overhead.py``'s (``Collector.stream`` at concurrency 64 against
``_minimal_agent.py``; traced = every span group on, rollgym's span pipeline exporting to a
trace store process) and the bare loop is ``bench/driver_throughput.py``'s. The three are run
one after another, ``--rounds`` times, into one profile each; per stage (the module a
function's own time is spent in) the profiled µs per rollout are printed side by side, so the
difference between two columns is what one side pays and the other does not. cProfile only
sees the main thread (the span writer thread is not in it) and inflates Python-heavy code
about twice over: read the differences and shares, not the absolute figures.

    python bench/profile_driver.py [-n 3000] [--rounds 2] [--top 12]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import driver_throughput
import tracing_overhead
from _minimal_agent import AgentProcess

from rollgym import event_loop
from rollgym.telemetry.groups import configure_gate
from rollgym.tracestore.store_process import start_trace_store

#: (stage, substrings of a function's file), first match wins; the rest by top folder.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("aiohttp, multidict, yarl", ("/aiohttp/", "/multidict/", "/yarl/", "aiohappyeyeballs")),
    ("span recording (pipeline/)", ("rollgym/telemetry/pipeline/",)),
    ("span helpers (spans, current_span, context)", ("rollgym/telemetry/",)),
    ("OpenTelemetry API", ("/opentelemetry/",)),
    ("rollgym HTTP client (http/)", ("rollgym/http/",)),
    ("dispatch + window + classify", ("driver/dispatch",)),
    ("rows, identity, unique ids", ("driver/rows", "identity.py", "unique_ids", "rewards.py")),
    ("retry, admission, collector", ("driver/retry", "driver/admission", "driver/collector")),
    ("rest of rollgym", ("rollgym/",)),
    ("asyncio", ("/asyncio/", "_weakrefset")),
    ("builtins (C calls)", ("~",)),
]


def stage_of(filename: str) -> str:
    for stage, needles in STAGES:
        if any(needle in filename for needle in needles):
            return stage
    return "other (bench code, stdlib)"


def by_stage(profile: cProfile.Profile, rollouts: int) -> dict[str, float]:
    """Profiled µs per rollout of each stage (own time of its functions)."""
    out: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _line, _name), (_cc, _nc, own, _cum, _callers) in stats.items():
        out[stage_of(filename)] += own / rollouts * 1e6
    return out


def top(profile: cProfile.Profile, rollouts: int, count: int) -> list[str]:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:count]
    return [
        f"    {own / rollouts * 1e6:7.1f} us  {name} ({Path(filename).name}:{line})"
        for (filename, line, name), (_cc, _nc, own, _cum, _callers) in rows
    ]


async def measure(url: str, endpoint: str, n: int, rounds: int) -> dict[str, cProfile.Profile]:
    configure_gate((), tracing_active=False)
    await driver_throughput.bare_loop(url, min(n, 1000))  # warm every path up
    await tracing_overhead.collect(url, min(n, 1000))
    await tracing_overhead.traced_round(url, min(n, 1000), endpoint, "process")

    async def off() -> None:
        configure_gate((), tracing_active=False)
        await tracing_overhead.collect(url, n)

    async def traced() -> None:
        await tracing_overhead.traced_round(url, n, endpoint, "process")

    async def bare() -> None:
        await driver_throughput.bare_loop(url, n)

    ways: dict[str, Callable[[], Awaitable[None]]] = {
        "bare loop": bare,
        "driver off": off,
        "driver traced": traced,
    }
    profiles = {name: cProfile.Profile() for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            profiles[name].enable()
            await way()
            profiles[name].disable()
            await asyncio.sleep(0)
    return profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=3000, help="rollouts per round and way")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="costliest functions per way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        store = start_trace_store(Path(tmp) / "traces.db", Path(tmp) / "tracestore.log")
        try:
            with AgentProcess() as agent:
                profiles = event_loop.run(measure(agent.url, store.endpoint, args.n, args.rounds))
        finally:
            store.stop()
    rollouts = args.n * args.rounds
    stages = {name: by_stage(profile, rollouts) for name, profile in profiles.items()}
    names = list(stages)
    print(f"profiled us per rollout by stage ({rollouts} rollouts a way; cProfile, main thread)")
    print(f"{'stage':48}" + "".join(f"{name:>15}" for name in names))
    keys = sorted({k for s in stages.values() for k in s}, key=lambda k: -stages[names[-1]][k])
    for key in keys:
        print(f"{key:48}" + "".join(f"{stages[name].get(key, 0.0):15.1f}" for name in names))
    print(f"{'total':48}" + "".join(f"{sum(stages[name].values()):15.1f}" for name in names))
    for name, profile in profiles.items():
        print(f"{name}: costliest functions (own time per rollout)")
        print("\n".join(top(profile, rollouts, args.top)))


if __name__ == "__main__":
    main()
