"""Python calls the driver makes per rollout, untraced and traced, this checkout against another.

Why calls and not time: on a shared machine a round's driver CPU moves by more than the
traced path's whole extra, while the number of calls does not move at all; and in the driver,
unlike in a hot loop, the traced path's cost follows its calls (about 0.7 µs each in situ,
docs/benchmarks.md). Each side runs in its own interpreter with its own ``PYTHONPATH``: the
real Collector (rows, admission, dispatch, the lean client) posts to the minimal loopback
agent (its own process) at concurrency 64 under cProfile, once with tracing off and once per
traced configuration, spans going into rollgym's recording tracer with a sink that discards
them (no exporter child, no store: only the driver's own work). Prints profiled calls per
rollout and the extra over untraced, per configuration and side.

    python bench/traced_calls.py --against /work/main/src [-n 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = HERE.parent / "src"

#: (label, span groups); None: tracing off.
CONFIGS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("off", None),
    ("tracing active, no span group", ()),
    ("rollout group only", ("rollout",)),
    ("rollout + http groups", ("rollout", "http")),
)

_CHILD = r"""
import cProfile, json, pstats, sys
sys.path.insert(0, sys.argv[3])
from _minimal_agent import AgentProcess
from rollgym import Collector, event_loop
from rollgym.telemetry._state import state
from rollgym.telemetry.groups import configure_gate
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.sampling import TimeOrderedIdGenerator

n, configs = int(sys.argv[1]), json.loads(sys.argv[2])
provider = RecordingTracerProvider(lambda record: None, id_generator=TimeOrderedIdGenerator())
tracer = provider.get_tracer("rollgym", "bench")


async def collect(url, count):
    async with Collector({"agent": url}, agent="agent", concurrency=64) as collector:
        async for outcome in collector.stream({"q": i} for i in range(count)):
            assert outcome.reward == 1


async def main(url):
    out = {}
    for label, groups in configs:
        if groups is None:
            configure_gate((), tracing_active=False)
        else:
            state.tracer = tracer
            configure_gate(tuple(groups), tracing_active=True)
        await collect(url, 300)  # every path warm before it is counted
        profile = cProfile.Profile()
        profile.enable()
        await collect(url, n)
        profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        out[label] = sum(row[1] for row in stats.values()) / n
    configure_gate((), tracing_active=False)
    return out


with AgentProcess() as agent:
    print(json.dumps(event_loop.run(main(agent.url))))
"""


def calls_per_rollout(src: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n), json.dumps(CONFIGS), str(HERE)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", type=Path, required=True, help="the other side's src/")
    parser.add_argument("-n", type=int, default=1000, help="rollouts counted per configuration")
    args = parser.parse_args()
    theirs = calls_per_rollout(args.against, args.n)
    ours = calls_per_rollout(OURS, args.n)
    print(f"profiled Python calls per rollout in the driver ({args.n} rollouts each)")
    print(f"{'configuration':32} {'other':>8} {'extra':>7} {'this':>8} {'extra':>7}")
    for label, _ in CONFIGS:
        a, b = theirs[label], ours[label]
        print(f"{label:32} {a:8.1f} {a - theirs['off']:+7.1f} {b:8.1f} {b - ours['off']:+7.1f}")
    print(f"other: {args.against}; this: {OURS}")


if __name__ == "__main__":
    main()
