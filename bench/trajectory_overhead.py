"""Trajectory capture on the quickstart: throughput with token capture on versus off, and size.

Runs ``rollgym run examples/quickstart.yaml`` (simulated model, both environments, both
agents, environment-routed episodes; telemetry off so only capture differs) in interleaved
rounds: off (no trajectories), tokens (``run.capture_tokens=true``: every turn, token ids,
log-probabilities), off, tokens ... The rate of a round is its rollouts over the span of its
collection (first ``started_at`` to last ``finished_at`` in ``rollouts.jsonl``), so server
start-up is not counted. Also reports bytes per rollout of ``trajectories.jsonl`` and of
``rollouts.jsonl``, and the CPU time per rollout of the whole run (driver and every server
process, from ``getrusage(RUSAGE_CHILDREN)``; start-up included), which other load on the
machine does not change the way it changes rates.

Prints both rates, the ratio tokens / off (target >= 0.85), CPU per rollout and the sizes.

    python bench/trajectory_overhead.py [--quick] [--repeats 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path

import orjson
from _jobs import quickstart_run


def run(output_dir: Path, repeats: int, capture: bool) -> tuple[float, int, int, int, float]:
    """One run; returns (rollouts/s of its collection, rollouts, trajectory bytes, rollout
    bytes, CPU seconds of the run and all its servers)."""
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    command = quickstart_run(
        output_dir,
        f"run.repeats={repeats}",
        f"run.capture_tokens={'true' if capture else 'false'}",
        "telemetry.preset=off",
        "telemetry.exporter=none",
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"run failed:\n{done.stdout}\n{done.stderr}")
    rollouts = [
        orjson.loads(line) for line in (output_dir / "rollouts.jsonl").read_bytes().splitlines()
    ]
    span = max(r["finished_at"] for r in rollouts) - min(r["started_at"] for r in rollouts)
    trajectories = output_dir / "trajectories.jsonl"
    trajectory_bytes = trajectories.stat().st_size if trajectories.exists() else 0
    rollout_bytes = (output_dir / "rollouts.jsonl").stat().st_size
    return len(rollouts) / span, len(rollouts), trajectory_bytes, rollout_bytes, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="repeats 3, 2 rounds")
    parser.add_argument("--repeats", type=int, default=8, help="run.repeats of the quickstart")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs (off, tokens)")
    args = parser.parse_args()
    repeats, rounds = (3, 2) if args.quick else (args.repeats, args.rounds)
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    sizes: dict[bool, tuple[int, int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="rollgym-bench-") as tmp:
        for index in range(rounds):
            for capture in (False, True):
                rate, count, trajectory_bytes, rollout_bytes, seconds = run(
                    Path(tmp) / f"{index}-{capture}", repeats, capture
                )
                rates[capture].append(rate)
                cpu[capture].append(seconds * 1000 / count)
                sizes[capture] = (count, trajectory_bytes, rollout_bytes)
    off, on = rates[False], rates[True]
    pairs = [t / o for t, o in zip(on, off, strict=True)]
    count, trajectory_bytes, rollout_bytes = sizes[True]
    print(
        f"quickstart, run.repeats={repeats} ({count} rollouts per run), {rounds} rounds (interleaved)"
    )
    print(
        f"capture off:    {' '.join(f'{x:,.0f}' for x in off)} /s (median {statistics.median(off):,.0f})"
    )
    print(
        f"capture tokens: {' '.join(f'{x:,.0f}' for x in on)} /s (median {statistics.median(on):,.0f})"
    )
    print(
        f"ratio tokens/off: {statistics.median(on) / statistics.median(off):.2f} of medians, "
        f"{statistics.median(pairs):.2f} median of adjacent pairs (target >= 0.85)"
    )
    cpu_off, cpu_on = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(
        f"CPU per rollout, all processes: off {cpu_off:.1f} ms, tokens {cpu_on:.1f} ms "
        f"(ratio off/tokens {cpu_off / cpu_on:.2f})"
    )
    print(
        f"bytes per rollout: trajectories.jsonl {trajectory_bytes / count:,.0f}, "
        f"rollouts.jsonl {rollout_bytes / count:,.0f} "
        f"(capture off: rollouts.jsonl {sizes[False][2] / sizes[False][0]:,.0f})"
    )


if __name__ == "__main__":
    main()
