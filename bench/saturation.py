"""First-attempt timeouts with 5,000 built-in rollouts in flight on a busy machine.

One real ``rollgym run`` job: the simulated model (each generation held ``--latency`` s, no
CPU), the arithmetic environment, the built-in ``single_turn`` agent, ``--n`` rows all
admitted at once, default tracing, ``run.timeout_s`` = ``--timeout`` and one attempt each, so
every rollout that rollgym's own servers starve past the limit shows as a ``timeout``
instead of being hidden by a retry. ``--burn K`` adds K busy-looping processes (at lowest
priority, stopped when the job ends) to saturate the cores the way other work would.

It prints completed/requested, the first-attempt timeouts and their share (target: 0), the
wall time, and the median and slowest rollout durations against the model latency. By default
it runs the same job twice back to back under the same load: with ``run.adaptive_window:
false`` (every attempt sent at once, the behaviour before the dispatch window) and with the
default adaptive window (``--window off`` / ``--window on`` runs one of them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _jobs import arithmetic_servers, write_job

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="rollouts, all in flight at once")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per generation")
    parser.add_argument("--timeout", type=float, default=60.0, help="run.timeout_s")
    parser.add_argument("--burn", type=int, default=0, help="busy-looping processes beside it")
    parser.add_argument(
        "--window",
        choices=["both", "off", "on"],
        default="both",
        help="run.adaptive_window: off, on, or both back to back (default)",
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores")
    for adaptive in {"both": [False, True], "off": [False], "on": [True]}[args.window]:
        run_once(args, adaptive)


def run_once(args: argparse.Namespace, adaptive: bool) -> None:
    """One job; prints its figures."""
    with tempfile.TemporaryDirectory(prefix="bench-saturation-") as tmp:
        root = Path(tmp)
        rows = root / "rows.jsonl"
        rows.write_text("".join(f'{{"question": "{i} + {i % 89}"}}\n' for i in range(args.n)))
        config = {
            "run": {
                "input": str(rows),
                "output_dir": str(root / "out"),
                "concurrency": args.n,
                "max_attempts": 1,
                "timeout_s": args.timeout,
                "adaptive_window": adaptive,
                "agent": "solver",
                "progress_interval_s": 5,
            },
            "servers": arithmetic_servers(args.latency),
            "telemetry": {"preset": "default"},
        }
        path = write_job(root, config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        burners = [
            subprocess.Popen(
                ["nice", "-n", "19", sys.executable, "-c", BURN.format(seconds=args.timeout * 10)]
            )
            for _ in range(args.burn)
        ]
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "rollgym", "run", str(path), "--no-table"],
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
        finally:
            wall = time.monotonic() - started
            for burner in burners:
                burner.terminate()
                burner.wait()
        out = root / "out"
        records = [orjson.loads(x) for x in (out / "rollouts.jsonl").read_bytes().splitlines()]
        failures_file = out / "failures.jsonl"
        failures = (
            [orjson.loads(x) for x in failures_file.read_bytes().splitlines()]
            if failures_file.exists()
            else []
        )
    kinds: dict[str, int] = {}
    for failure in failures:
        kinds[failure.get("error_kind", "?")] = kinds.get(failure.get("error_kind", "?"), 0) + 1
    timeouts = kinds.pop("timeout", 0)
    other = sum(kinds.values())
    print(
        f"{args.n:,} single_turn rollouts in flight at once, model latency {args.latency} s, "
        f"timeout_s {args.timeout:g}, one attempt each, {args.burn} burner process(es), "
        f"run.adaptive_window {str(adaptive).lower()}; rollgym run exited {proc.returncode} "
        f"after {wall:.1f} s wall (load average now {os.getloadavg()[0]:.1f})"
    )
    print(f"completed {len(records):,}/{args.n:,} ({len(records) / args.n:.3f})")
    print(
        f"first-attempt timeouts: {timeouts:,} ({timeouts / args.n:.1%}; target 0); "
        f"other failures: {other:,} {kinds or ''}"
    )
    if records:
        durations = sorted(r["duration_s"] for r in records)
        print(
            f"rollout duration: median {statistics.median(durations):.2f} s, "
            f"slowest {durations[-1]:.2f} s ({durations[-1] / args.latency:.0f}x the latency)"
        )


if __name__ == "__main__":
    main()
