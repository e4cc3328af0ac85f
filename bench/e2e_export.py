"""Export keeps up: the fastest end-to-end run this machine allows, with full tracing.

Runs ``rollgym run examples/quickstart.yaml`` (every built-in server: simulated model, two
environments, a single-turn and a tool-loop agent, environment-routed episodes) with the
simulated model's latency set to zero, the default preset and default export settings, to the
run's local trace store. Reports rollouts/s, spans exported and dropped (target: 0 dropped),
what the trace store holds, and whether ``rollgym traces check`` passes.

    python bench/e2e_export.py [--quick] [--repeats 20] [--concurrency 128]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _jobs import quickstart_run


def run(output_dir: Path, repeats: int, concurrency: int) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    command = quickstart_run(
        output_dir,
        f"run.repeats={repeats}",
        f"run.concurrency={concurrency}",
        "servers.policy.latency.kind=fixed",
        "servers.policy.latency.seconds=0",
        "telemetry.preset=default",
        "--no-table",
    )
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"rollgym run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return wall, orjson.loads((output_dir / "summary.json").read_bytes())


def stored_spans(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0])
    finally:
        conn.close()


def traces_check(output_dir: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "check", str(output_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, (proc.stdout.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repeats (330 rollouts)")
    parser.add_argument("--repeats", type=int, default=20, help="repeats of the 110 task rows")
    parser.add_argument("--concurrency", type=int, default=128)
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    with tempfile.TemporaryDirectory(prefix="rollgym-e2e-export-") as tmp:
        out = Path(tmp) / "run"
        wall, summary = run(out, repeats, args.concurrency)
        stored = stored_spans(out / "traces.db")
        check_rc, check_line = traces_check(out)
    telemetry = summary.get("telemetry", {})
    exported = int(telemetry.get("spans_exported", 0))
    dropped = int(telemetry.get("spans_dropped", 0))
    completed = int(summary["completed"])
    print(
        f"quickstart servers, simulated model latency 0, preset default, local trace store; "
        f"{completed} rollouts ({summary['failed']} failed), concurrency {args.concurrency}"
    )
    print(
        f"rollouts/s: {summary['rollouts_per_s']:,.1f} (run {summary['duration_s']:.1f} s, "
        f"wall with startup and flush {wall:.1f} s)"
    )
    print(
        f"spans exported: {exported:,} ({exported / max(completed, 1):.1f} per rollout, "
        f"{exported / summary['duration_s']:,.0f}/s), dropped: {dropped:,} (target 0)"
    )
    print(f"spans in the trace store: {stored:,} (equal to exported: {stored == exported})")
    print(f"rollgym traces check: exit {check_rc}: {check_line}")


if __name__ == "__main__":
    main()
