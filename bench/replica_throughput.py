"""Throughput with a CPU-bound environment: 1 vs 2 replicas of it (issue 12).

The environment burns 5 ms of CPU in each call (``_burn_env.BurnEnv``; two calls per
rollout); the agent only seeds and verifies. The same job runs with
``servers.env.replicas=1`` and ``=2``, alternating, ``--repeats`` times each; the script
prints each run's rollouts/s and the ratio of the medians (target >= 1.6 on 2 free cores),
with the spread of the ratios of the pairs. Runs are real ``rollgym run`` jobs on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def run_once(root: Path, replicas: int, rows: int, concurrency: int) -> float:
    """One job; its rollouts per second (from summary.json)."""
    out = root / f"out-{replicas}-{len(list(root.glob('out-*')))}"
    config = {
        "run": {
            "input": str(root / "rows.jsonl"),
            "output_dir": str(out),
            "concurrency": concurrency,
            "agent": "agent",
            "progress_interval_s": 5,
        },
        "servers": {
            "env": {"kind": "environment", "impl": "_burn_env:BurnEnv", "replicas": replicas},
            "agent": {
                "kind": "agent",
                "impl": "_burn_env:SeedVerifyAgent",
                "environment": "env",
                "replicas": 2,
            },
        },
        "telemetry": {"preset": "off", "exporter": "none"},
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    (root / "rows.jsonl").write_text("".join(f'{{"q": {i}}}\n' for i in range(rows)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]),
        "OTEL_SDK_DISABLED": "true",
    }
    subprocess.run(
        [sys.executable, "-m", "rollgym", "run", str(path)],
        env=env,
        check=True,
        capture_output=True,
        cwd=root,
    )
    summary = json.loads((out / "summary.json").read_text())
    if summary["completed"] != rows:
        raise SystemExit(f"run with {replicas} replica(s) completed {summary['completed']}/{rows}")
    return float(summary["rollouts_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000, help="rollouts per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument("--concurrency", type=int, default=64, help="run.concurrency")
    args = parser.parse_args()
    rates: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="rollgym-replicas-") as tmp:
        for repeat in range(args.repeats):
            for replicas in (1, 2):
                rate = run_once(Path(tmp), replicas, args.rows, args.concurrency)
                rates[replicas].append(rate)
                print(f"run {repeat + 1}: {replicas} replica(s): {rate:.1f} rollouts/s", flush=True)
    pairs = [two / one for one, two in zip(rates[1], rates[2], strict=True)]
    ratio = statistics.median(rates[2]) / statistics.median(rates[1])
    print(
        f"1 replica: median {statistics.median(rates[1]):.1f} rollouts/s; 2 replicas: median "
        f"{statistics.median(rates[2]):.1f} rollouts/s"
    )
    print(
        f"ratio 2 vs 1 replicas: {ratio:.2f} (target >= 1.6 on 2 free cores); pairs "
        f"{', '.join(f'{p:.2f}' for p in pairs)} (spread {min(pairs):.2f}-{max(pairs):.2f}); "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
