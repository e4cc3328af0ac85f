"""The quickstart, traced with the default preset vs tracing off, side by side.

Runs ``rollgym run examples/quickstart.yaml run.repeats=8`` (880 rollouts through the built-in
servers: simulated model with ~20 ms latency, two environments, two agents, all on this
machine) alternately with ``telemetry.preset=off`` and with the default preset exporting to the
run's local trace store, each in a fresh output directory, and reads ``rollouts_per_s`` from
each run's ``summary.json`` (the rollout phase: server start-up and shutdown excluded). Prints
both rates, the ratio default / off of the medians (target >= 0.9), the span counts, and the
CPU a span costs on this path, all processes together: each run's CPU (user + system of the
whole process tree, read with ``RUSAGE_CHILDREN`` around it: the driver, its servers, their
span exporter children and the trace store) traced minus off, divided by the spans exported.
Start-up and shutdown are in both and cancel out but for what tracing adds to them.
``--with-otlp`` adds a third run to each round: the default preset with
``ROLLGYM_STORE_OTLP=1``, every process's exporter child posting OTLP to the store instead of
span records (the fallback), so the two store paths are compared in one session.

    python bench/quickstart_tracing.py [--rounds 3] [--repeats 8] [--with-otlp]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "quickstart.yaml"
TARGET = 0.9


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(preset: str, repeats: int, out: Path, store_otlp: bool = False) -> dict:
    command = [
        sys.executable,
        "-m",
        "rollgym",
        "run",
        str(CONFIG),
        f"run.repeats={repeats}",
        f"run.output_dir={out}",
        f"telemetry.preset={preset}",
    ]
    cpu = _children_cpu_s()
    env = {**os.environ, "ROLLGYM_STORE_OTLP": "1" if store_otlp else "0"}
    subprocess.run(
        command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    summary = json.loads((out / "summary.json").read_text())
    summary["bench_cpu_s"] = _children_cpu_s() - cpu
    if summary["completed"] != summary["requested"]:
        raise SystemExit(f"{preset}: {summary['completed']} of {summary['requested']} completed")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument(
        "--with-otlp", action="store_true", help="also run the default preset posting OTLP"
    )
    args = parser.parse_args()
    ways = ("off", "default", "otlp") if args.with_otlp else ("off", "default")
    rates: dict[str, list[float]] = {way: [] for way in ways}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    spans: dict[str, list[dict]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory(prefix="rollgym-quickstart-") as tmp:
        for i in range(args.rounds):
            for way in ways:
                preset = "off" if way == "off" else "default"
                out = Path(tmp) / f"{way}-{i}"
                summary = run_once(preset, args.repeats, out, store_otlp=way == "otlp")
                rates[way].append(summary["rollouts_per_s"])
                cpu[way].append(summary["bench_cpu_s"])
                spans[way].append(summary["telemetry"])
    print(f"quickstart, run.repeats={args.repeats}, {args.rounds} rounds (alternating)")
    print("default: span records to the run's store; otlp: ROLLGYM_STORE_OTLP=1 (OTLP to it)")
    for way, values in rates.items():
        listed = " ".join(f"{v:,.0f}" for v in values)
        print(f"{way:<8} {listed} rollouts/s (median {statistics.median(values):,.0f})")
    cpu_off = statistics.median(cpu["off"])
    for way in ways[1:]:
        pairs = [d / o for d, o in zip(rates[way], rates["off"], strict=True)]
        ratio = statistics.median(rates[way]) / statistics.median(rates["off"])
        print(
            f"{way}: ratio {way} / off: {ratio:.2f} of medians, pairs "
            f"{min(pairs):.2f}-{max(pairs):.2f} (target >= {TARGET})"
        )
        exported = sum(s.get("spans_exported", 0) for s in spans[way])
        dropped = sum(s.get("spans_dropped", 0) for s in spans[way])
        print(f"  spans (all processes): {exported:,} exported, {dropped:,} dropped")
        cpu_on = statistics.median(cpu[way])
        per_run = exported / max(1, len(spans[way]))
        print(
            f"  CPU of a run, all processes: off {cpu_off:.2f} s, {way} {cpu_on:.2f} s "
            f"(medians); CPU per span: {(cpu_on - cpu_off) / max(1.0, per_run) * 1e6:.1f} us "
            f"({per_run:,.0f} spans a run; goal <= 10 us)"
        )


if __name__ == "__main__":
    main()
