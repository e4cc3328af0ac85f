"""How long ``rollgym compare`` takes on two large runs, and (``--against-src``) against
another checkout's, side by side.

Writes two run directories the way the driver does (``rollouts.jsonl`` lines with a task
index, a dispatch name and a 0/1 reward; about a tenth of the tasks solved every time, a tenth
never, the rest at random), then runs ``rollgym compare A B --json`` in a fresh interpreter
``--rounds`` times, alternating with the other checkout's sources when given, and prints the
median user+system CPU of each and their ratio. With ``--against-src`` it also checks that both
printed the same JSON: a faster comparison must draw the same intervals.

    python bench/compare_runs.py [--tasks 2000] [--repeats 10] [--rounds 3]
                                 [--against-src <other checkout>/src]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

SRC = Path(__file__).resolve().parent.parent / "src"


def write_run(root: Path, tasks: int, repeats: int, seed: int) -> Path:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    with open(root / "rollouts.jsonl", "wb") as out:
        for task in range(tasks):
            kind = task % 10
            chance = 1.0 if kind == 0 else 0.0 if kind == 1 else rng.random()
            for index in range(repeats):
                line = {
                    "rollout_id": f"{task}-{index}",
                    "task_index": task,
                    "rollout_index": index,
                    "attempt": 0,
                    "dispatch_name": "solver",
                    "reward": float(rng.random() < chance),
                }
                out.write(orjson.dumps(line) + b"\n")
    (root / "failures.jsonl").write_bytes(b"")
    return root


def timed_compare(src: Path, a: Path, b: Path) -> tuple[float, bytes]:
    """CPU seconds of one ``rollgym compare --json`` importing ``src``, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, "-m", "rollgym", "compare", str(a), str(b), "--json"]
    printed = subprocess.run(command, env=env, check=True, capture_output=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, printed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against-src", type=Path, help="another checkout's src/")
    args = parser.parse_args()
    sides = {"this checkout": SRC}
    if args.against_src is not None:
        sides["against"] = args.against_src.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        a = write_run(Path(tmp) / "a", args.tasks, args.repeats, seed=1)
        b = write_run(Path(tmp) / "b", args.tasks, args.repeats, seed=2)
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        printed: dict[str, bytes] = {}
        for _ in range(args.rounds):
            for name, src in sides.items():
                seconds, printed[name] = timed_compare(src, a, b)
                cpu[name].append(seconds)
    print(f"{args.tasks} tasks x {args.repeats} repeats a run, {args.rounds} rounds")
    for name, values in cpu.items():
        print(f"  {name:14s} {statistics.median(values):7.2f} s CPU (median)")
    if "against" in cpu:
        ratio = statistics.median(cpu["against"]) / statistics.median(cpu["this checkout"])
        same = printed["against"] == printed["this checkout"]
        print(f"  against / this checkout: {ratio:.2f}x; same JSON: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
