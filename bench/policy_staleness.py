"""Bounded staleness under a simulated asynchronous trainer: what it buys, what it costs.

A simulated model (lognormal latency), the keychain environment and the tool-loop agent run
as real processes on loopback; the driver is a :class:`rollgym.Collector` in this process.
The "trainer" consumes whole groups (``collector.groups``, ``--group`` repeats of a task)
and bumps ``collector.policy_version`` every ``--k`` completed groups, as an asynchronous
RL trainer would after each optimizer step. The same rows run with ``max_staleness`` off,
2, 1 and 0, one after another against the same servers, in one run; for each the script
prints the distribution of the lag of the results handed over (versions the oldest model
call was behind the current one), the re-runs and ``stale`` failures the bound caused, the
results per second, and the ratio of that to the run without a bound.

    PYTHONPATH=src python bench/policy_staleness.py --tasks 64 --group 8 --k 4 --concurrency 256
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rollgym import Collector, RolloutFailure, RolloutResult

BOUNDS: list[int | None] = [None, 2, 1, 0]


def _servers(latency_s: float) -> dict[str, Any]:
    return {
        "policy": {
            "kind": "model",
            "impl": "simulated",
            "accuracy": 0.8,
            "latency": {"kind": "lognormal", "seconds": latency_s, "sigma": 0.5},
        },
        "keys": {"kind": "environment", "impl": "keychain"},
        "walker": {
            "kind": "agent",
            "impl": "tool_loop",
            "model": "policy",
            "environment": "keys",
            "max_turns": 12,
        },
    }


@asynccontextmanager
async def _launched(servers: dict[str, Any], out: Path) -> AsyncIterator[dict[str, str]]:
    from rollgym.config import JobConfig
    from rollgym.placement.launcher import launch_servers
    from rollgym.telemetry.settings import TelemetrySettings, server_env

    rows = out / "unused.jsonl"
    rows.write_text("{}\n", encoding="utf-8")
    config = JobConfig.model_validate(
        {"run": {"input": str(rows), "output_dir": str(out)}, "servers": servers}
    )
    env = server_env(TelemetrySettings(run_id="bench-staleness"))
    async with launch_servers(config, run_id="bench-staleness", output_dir=out, env=env) as urls:
        yield urls


async def _one(
    urls: dict[str, str], rows: list[dict[str, Any]], bound: int | None, args: Any
) -> dict[str, Any]:
    collector = Collector(
        {"walker": urls["walker"], "keys": urls["keys"]},
        agent="walker",
        agents=("walker",),
        model_servers={"policy": urls["policy"]},
        concurrency=args.concurrency,
        max_attempts=args.max_attempts,
        timeout_s=120,
        retry_backoff_s=0.01,
        policy_version=0,
        max_staleness=bound,
    )
    lags: Counter[int] = Counter()
    attempts = stale = results = groups = 0
    started = time.perf_counter()
    async with collector:
        async for group in collector.groups(rows, size=args.group):
            groups += 1
            for outcome in group:
                attempts += outcome.attempt + 1
                if isinstance(outcome, RolloutResult):
                    results += 1
                    if outcome.policy_lag is not None:
                        lags[outcome.policy_lag] += 1
                elif isinstance(outcome, RolloutFailure) and outcome.error_kind == "stale":
                    stale += 1
            if groups % args.k == 0:
                collector.policy_version = groups // args.k  # the trainer's step
    wall = time.perf_counter() - started
    return {
        "bound": bound,
        "lags": lags,
        "results": results,
        "stale": stale,
        "reruns": attempts - len(rows) * args.group,
        "wall_s": wall,
        "per_s": results / wall if wall > 0 else 0.0,
        "versions": groups // args.k,
    }


async def main(args: argparse.Namespace) -> None:
    rows = [{"seed": 5000 + i, "hops": args.hops} for i in range(args.tasks)]
    with tempfile.TemporaryDirectory(prefix="rollgym-staleness-") as tmp:
        async with _launched(_servers(args.latency_s), Path(tmp)) as urls:
            await _one(urls, rows[: max(1, args.tasks // 8)], None, args)  # warm-up
            runs = [await _one(urls, rows, bound, args) for bound in BOUNDS]
    off = runs[0]["per_s"]
    print(
        f"{args.tasks} tasks x {args.group} repeats (walker, {args.hops} hops), concurrency "
        f"{args.concurrency}, trainer bumps every {args.k} groups, max_attempts {args.max_attempts}"
    )
    header = f"{'max_staleness':>13} {'lag 0':>6} {'lag 1':>6} {'lag 2':>6} {'lag 3+':>6} "
    print(
        header
        + f"{'p_max':>5} {'reruns':>7} {'stale':>6} {'res/s':>7} {'vs off':>6} {'versions':>8}"
    )
    for run in runs:
        lags: Counter[int] = run["lags"]
        total = sum(lags.values()) or 1
        share = [100 * lags[i] / total for i in range(3)]
        rest = 100 * sum(v for k, v in lags.items() if k >= 3) / total
        name = "off" if run["bound"] is None else str(run["bound"])
        print(
            f"{name:>13} {share[0]:5.1f}% {share[1]:5.1f}% {share[2]:5.1f}% {rest:5.1f}% "
            f"{max(lags, default=0):>5} {run['reruns']:>7} {run['stale']:>6} "
            f"{run['per_s']:7.1f} {run['per_s'] / off if off else 0:6.2f} {run['versions']:>8}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--k", type=int, default=4, help="groups per trainer step")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument(
        "--hops", type=int, default=3, help="keychain hops (model calls ~ hops + 1)"
    )
    parser.add_argument("--latency-s", type=float, default=0.05, help="median model latency")
    parser.add_argument("--max-attempts", type=int, default=4)
    sys.exit(asyncio.run(main(parser.parse_args())))
