"""10,000 rollouts in flight at once against an agent that holds each request 5 s.

The driver runs in its own subprocess (so its peak RSS is its own), with concurrency 10,000 and
10,000 rows: every rollout must be admitted at once, complete, and the wall time must stay near
the 5 s hold (target < 15 s), with peak RSS < 1.5 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import event_loop  # noqa: E402


async def child(url: str, n: int) -> dict[str, float]:
    from rollgym import Collector, RolloutResult

    peak = 0
    completed = 0
    all_in_flight_at = float("nan")
    async with Collector({"agent": url}, agent="agent", concurrency=n, timeout_s=60) as collector:
        start = time.perf_counter()

        async def watch() -> None:
            nonlocal peak, all_in_flight_at
            while True:
                peak = max(peak, len(collector.in_flight))
                if peak == n and all_in_flight_at != all_in_flight_at:
                    all_in_flight_at = time.perf_counter() - start
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        async for outcome in collector.stream({"q": i} for i in range(n)):
            completed += isinstance(outcome, RolloutResult)
        wall = time.perf_counter() - start
        watcher.cancel()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "n": n,
        "completed": completed,
        "peak_in_flight": peak,
        "wall_s": wall,
        "peak_rss_mb": rss_mb,
        "admitted_s": all_in_flight_at,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 in flight, 2 s hold")
    parser.add_argument("--child", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(event_loop.run(child(args.child[0], int(args.child[1])))))
        return
    n, hold = (2_000, 2.0) if args.quick else (10_000, 5.0)
    with AgentProcess(hold_s=hold) as agent:
        out = subprocess.run(
            [sys.executable, __file__, "--child", agent.url, str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"in flight at once: {result['peak_in_flight']:,} of {n:,} (all admitted after "
        f"{result['admitted_s']:.2f} s); completed {result['completed']:,}"
    )
    print(
        f"wall time: {result['wall_s']:.2f} s for a {hold:.0f} s hold (ratio {result['wall_s'] / hold:.2f}; target < 3)"
    )
    print(f"driver peak RSS: {result['peak_rss_mb']:.0f} MB (target < 1536 MB)")


if __name__ == "__main__":
    main()
