"""10,000 rollouts in flight at once against an agent that holds each request 5 s.

The driver runs in its own subprocess (so its peak RSS is its own), with concurrency 10,000 and
10,000 rows: every rollout must be admitted at once, complete, and the wall time must stay near
the 5 s hold (target < 15 s), with peak RSS < 1.5 GB.

``--n 65536 --replicas 4``: the scale-out figure: 65,536 in flight over 4 agent
replicas, balanced by the driver's HTTP client. Every in-flight rollout is one socket of the
driver, so the driver raises its soft open-file limit (towards the hard limit, which only a
privileged process can raise); where the hard limit is lower than the run needs, the run is
capped to what the limit allows, and the script says what it raised, what it capped and why.
It also prints the open fds the driver used per in-flight rollout and, from that, the hard
limit a machine needs for 65,536 in flight.

Each size runs twice (``--window both``, the default): with the dispatch window off
(``adaptive_window=False``: every attempt sent at once, the capability the targets are for:
all in flight at the agent, one socket each) and with the default window, which opens from
1,024 attempts and doubles per round trip against a healthy server, so a run of 10,000 that
the agent holds 5 s each takes about four holds (docs/scale.md, "the price"). The fds per
rollout and the 65,536 projection come from the run with the window off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import event_loop  # noqa: E402

#: File descriptors the driver needs beyond one socket per rollout (stdio, pool, loop).
FD_HEADROOM = 1024


#: The scale-out target: the hard open-file limit it needs is printed from the measured fds.
TARGET_IN_FLIGHT = 65_536


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def child(urls: list[str], n: int, window: bool) -> dict[str, float]:
    from rollgym import Collector, RolloutResult

    soft_before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    fds_before = _open_fds()

    peak = 0
    peak_fds = 0
    completed = 0
    failed = 0
    all_in_flight_at = float("nan")
    async with Collector(
        {"agent": urls[0]},
        agent="agent",
        concurrency=n,
        timeout_s=120,
        replicas={"agent": urls} if len(urls) > 1 else None,
        adaptive_window=window,
    ) as collector:
        soft_after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        start = time.perf_counter()

        async def watch() -> None:
            nonlocal peak, all_in_flight_at, peak_fds
            ticks = 0
            while True:
                peak = max(peak, len(collector.in_flight))
                if peak == n and all_in_flight_at != all_in_flight_at:
                    all_in_flight_at = time.perf_counter() - start
                if ticks % 10 == 0:
                    with contextlib.suppress(OSError):
                        peak_fds = max(peak_fds, _open_fds())
                ticks += 1
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        async for outcome in collector.stream({"q": i} for i in range(n)):
            completed += isinstance(outcome, RolloutResult)
            failed += not isinstance(outcome, RolloutResult)
        wall = time.perf_counter() - start
        watcher.cancel()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "n": n,
        "completed": completed,
        "failed": failed,
        "peak_fds": peak_fds,
        "peak_in_flight": peak,
        "wall_s": wall,
        "peak_rss_mb": rss_mb,
        "admitted_s": all_in_flight_at,
        "soft_limit_before": soft_before,
        "soft_limit_after": soft_after,
        "fds_before": fds_before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 in flight, 2 s hold")
    parser.add_argument("--n", type=int, default=10_000, help="rollouts, all in flight at once")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds the agent holds each")
    parser.add_argument("--replicas", type=int, default=1, help="agent replicas to balance over")
    parser.add_argument(
        "--window",
        choices=("off", "on", "both"),
        default="both",
        help="the dispatch window: off (all sent at once), on (the default), or both in turn",
    )
    parser.add_argument("--child", nargs=3, metavar=("URLS", "N", "W"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        urls = args.child[0].split(",")
        window = args.child[2] == "on"
        print(json.dumps(event_loop.run(child(urls, int(args.child[1]), window))))
        return
    n, hold = (2_000, 2.0) if args.quick else (args.n, args.hold)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open-file limit here: soft {_limit(soft)}, hard {_limit(hard)}")
    if hard != resource.RLIM_INFINITY and hard < n + FD_HEADROOM:
        capped = hard - FD_HEADROOM
        print(
            f"CAPPED: {n:,} in flight needs one driver socket each plus ~{FD_HEADROOM:,} more "
            f"({n + FD_HEADROOM:,} open files), above this machine's hard limit of {hard:,}, "
            f"which an unprivileged process cannot raise; running {capped:,} in flight "
            f"instead. To run {n:,}: raise the hard limit (`ulimit -Hn` as root or with "
            "CAP_SYS_RESOURCE, LimitNOFILE= in systemd, --ulimit nofile= in docker)."
        )
        n = capped
    for window in ("off", "on") if args.window == "both" else (args.window,):
        _one_run(args, n, hold, hard, window)


def _one_run(args: argparse.Namespace, n: int, hold: float, hard: int, window: str) -> None:
    """One job of ``n`` rollouts against fresh agents, the dispatch window ``window``."""
    if window == "off":
        print("-- dispatch window off: every attempt sent at once")
    else:
        holds = 1 + max(0.0, math.log2(n / 1024))
        print(
            f"-- dispatch window on (the default): it opens from 1,024 and doubles per round "
            f"trip, so {n:,} take about {holds:.1f} holds"
        )
    agents = [AgentProcess(hold_s=hold) for _ in range(args.replicas)]
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", ",".join(a.url for a in agents), str(n), window],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for agent in agents:
            agent.stop()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"in flight at once: {result['peak_in_flight']:,} of {n:,} over {args.replicas} agent "
        f"replica(s) (all admitted after {result['admitted_s']:.2f} s); completed "
        f"{result['completed']:,}, failed {result['failed']:,} (exact: "
        f"{result['completed'] + result['failed'] == n})"
    )
    print(
        f"driver open-file limit: soft raised from {_limit(result['soft_limit_before'])} to "
        f"{_limit(result['soft_limit_after'])} by the driver itself (hard {_limit(hard)})"
    )
    per_rollout = (result["peak_fds"] - result["fds_before"]) / max(result["peak_in_flight"], 1)
    if window == "off":
        needed = math.ceil(TARGET_IN_FLIGHT * per_rollout) + int(result["fds_before"])
        print(
            f"driver peak open fds: {result['peak_fds']:,} ({result['fds_before']:,} before the "
            f"run): {per_rollout:.3f} fds per in-flight rollout, so {TARGET_IN_FLIGHT:,} in "
            f"flight needs ~{needed:,} open files in the driver (a hard limit of at least that) "
            f"and each of {args.replicas} agent replica(s) "
            f"~{math.ceil(TARGET_IN_FLIGHT / args.replicas):,}"
        )
        target = "target < 3"
    else:
        print(f"driver peak open fds: {result['peak_fds']:,} (the window holds the rest unsent)")
        target = "the window's ramp, no target"
    ratio = result["wall_s"] / hold
    print(
        f"wall time: {result['wall_s']:.2f} s for a {hold:.0f} s hold (ratio {ratio:.2f}; {target})"
    )
    print(f"driver peak RSS: {result['peak_rss_mb']:.0f} MB (target < 1536 MB)")


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value:,}"


if __name__ == "__main__":
    main()
