"""Throughput of a replica-bound environment: 1 vs 2 replicas of it.

Two kinds of replica-bound work, each 5 ms per environment call (two calls per rollout; the
agent only seeds and verifies, ``_burn_env.py``):

- ``hold``: each replica serves one call at a time and holds it 5 ms (one sandbox or one
  accelerator behind each replica). Capacity is per replica and costs almost no CPU, so two
  replicas can double the throughput on any machine: this is what balancing must deliver.
- ``cpu``: each call burns 5 ms of CPU. Two replicas double the throughput only with two
  cores free for them; the driver and the agents need CPU too, and on a 2-core machine they
  take what the second replica would need.

The same job runs with ``servers.env.replicas=1`` and ``=2``, alternating, ``--repeats`` times
each, for each ``--work`` kind; the script prints each run's rollouts/s, the ratio of the
medians (target >= 1.6) with the spread of the pairs, and a profile: the CPU seconds each
role used per 1,000 rollouts (driver, agents, environment replicas, sampled from /proc while
the run lasts), and how busy the busiest environment replica was (its CPU over the run's wall
time), which says whether the replicas or the rest were the bottleneck.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _burn_env import BURN_S  # noqa: E402

SRC = HERE.parent / "src"
TICKS = os.sysconf("SC_CLK_TCK")
ENVIRONMENTS = {"hold": "_burn_env:HoldEnv", "cpu": "_burn_env:BurnEnv"}


def _stat(pid: int) -> tuple[int, float] | None:
    """A process's parent pid and the user + system CPU seconds it has used (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _role(pid: int, parent: int, driver: int) -> str | None:
    """``driver``, or the server instance one of its children serves (``env``, ``env@1``)."""
    if pid == driver:
        return "driver"
    if parent != driver:
        return None
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"_ROLLGYM_SERVER_SPEC="):
            spec = json.loads(entry.split(b"=", 1)[1])
            replica = int(spec.get("replica", 0))
            return spec["name"] + (f"@{replica}" if replica else "")
    return None


class CpuSampler:
    """Samples the CPU time of the driver and its server processes until stopped.

    Counts from the first rollout on (when ``started`` appears): the servers' start-up (their
    imports) is not what a rollout costs.
    """

    def __init__(self, driver: int, started: Path) -> None:
        self.driver = driver
        self.started = started
        self.baseline: dict[int, float] | None = None
        self.last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                stat = _stat(pid)
                if stat is None:
                    continue
                known = self.last.get(pid)
                role = known[0] if known else _role(pid, stat[0], self.driver)
                if role is not None:
                    self.last[pid] = (role, stat[1])
            if self.baseline is None and self.started.exists():
                self.baseline = {pid: cpu for pid, (_, cpu) in self.last.items()}

    def stop(self) -> dict[str, float]:
        """CPU seconds per instance from the first rollout on (the last sample of each)."""
        self._stop.set()
        self._thread.join()
        baseline = self.baseline or {}
        used: dict[str, float] = defaultdict(float)
        for pid, (role, cpu) in self.last.items():
            used[role] += cpu - baseline.get(pid, 0.0)
        return dict(used)


def run_once(
    root: Path, work: str, replicas: int, rows: int, concurrency: int
) -> tuple[float, float, dict[str, float]]:
    """One job: rollouts per second and wall time of its rollouts (first start to last end,
    so the servers' start-up is left out) and the CPU seconds per instance."""
    out = root / f"out-{work}-{replicas}-{len(list(root.glob('out-*')))}"
    config = {
        "run": {
            "input": str(root / "rows.jsonl"),
            "output_dir": str(out),
            "concurrency": concurrency,
            "agent": "agent",
            "progress_interval_s": 5,
        },
        "servers": {
            "env": {"kind": "environment", "impl": ENVIRONMENTS[work], "replicas": replicas},
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollgym", "run", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    sampler = CpuSampler(proc.pid, out / "rollouts.jsonl")
    try:
        output, _ = proc.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        cpu = sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{output.decode(errors='replace')}")
    summary = json.loads((out / "summary.json").read_text())
    if summary["completed"] != rows:
        raise SystemExit(f"run with {replicas} replica(s) completed {summary['completed']}/{rows}")
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    wall = max(r["finished_at"] for r in records) - min(r["started_at"] for r in records)
    return rows / wall, wall, cpu


def profile_line(cpu: dict[str, float], rows: int, wall_s: float) -> str:
    """CPU seconds per 1,000 rollouts by role, and the busiest environment replica's load."""
    roles: dict[str, float] = defaultdict(float)
    for instance, seconds in cpu.items():
        roles[instance.split("@")[0]] += seconds
    per_k = ", ".join(
        f"{role} {roles[role] * 1000 / rows:.1f}" for role in ("driver", "agent", "env")
    )
    envs = [seconds for instance, seconds in cpu.items() if instance.split("@")[0] == "env"]
    busiest = max(envs) / wall_s if envs and wall_s > 0 else 0.0
    total = sum(cpu.values()) / wall_s if wall_s > 0 else 0.0
    return (
        f"CPU s per 1,000 rollouts: {per_k}; busiest env replica {busiest:.0%} busy; "
        f"all processes {total:.2f} cores"
    )


def ceiling(cpu: dict[str, float], rows: int, cores: int, held_s: float) -> float:
    """The best 2-vs-1 ratio ``cores`` free cores allow, from the CPU one rollout costs.

    A replica is busy ``e`` seconds per rollout: its CPU, or the time it holds its slot
    (``held_s``) if longer; the driver and agents use ``o`` CPU seconds. One replica runs at
    most ``1/e`` rollouts/s, two at most ``2/e``, the machine at most ``cores/(cpu + o)``.
    """
    env_cpu = sum(s for instance, s in cpu.items() if instance.split("@")[0] == "env") / rows
    other = sum(cpu.values()) / rows - env_cpu
    busy = max(env_cpu, held_s)
    if busy <= 0:
        return float("nan")
    machine = cores / (env_cpu + other)
    return min(2 / busy, machine) / min(1 / busy, machine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000, help="rollouts per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument("--concurrency", type=int, default=64, help="run.concurrency")
    parser.add_argument(
        "--work",
        choices=[*ENVIRONMENTS, "both"],
        default="both",
        help="hold: one 5 ms call at a time per replica; cpu: 5 ms of CPU per call",
    )
    args = parser.parse_args()
    kinds = list(ENVIRONMENTS) if args.work == "both" else [args.work]
    with tempfile.TemporaryDirectory(prefix="rollgym-replicas-") as tmp:
        for work in kinds:
            rates: dict[int, list[float]] = {1: [], 2: []}
            ceilings: list[float] = []
            for repeat in range(args.repeats):
                for replicas in (1, 2):
                    load = os.getloadavg()[0]
                    rate, wall, cpu = run_once(
                        Path(tmp), work, replicas, args.rows, args.concurrency
                    )
                    rates[replicas].append(rate)
                    held = 2 * BURN_S if work == "hold" else 0.0  # two calls per rollout
                    ceilings.append(ceiling(cpu, args.rows, os.cpu_count() or 1, held))
                    print(
                        f"{work} run {repeat + 1}: {replicas} replica(s): {rate:.1f} rollouts/s "
                        f"(load average before {load:.1f}); "
                        f"{profile_line(cpu, args.rows, wall)}",
                        flush=True,
                    )
            pairs = [two / one for one, two in zip(rates[1], rates[2], strict=True)]
            ratio = statistics.median(rates[2]) / statistics.median(rates[1])
            print(
                f"{work}: 1 replica median {statistics.median(rates[1]):.1f} rollouts/s; "
                f"2 replicas median {statistics.median(rates[2]):.1f} rollouts/s; "
                f"ratio {ratio:.2f} (target >= 1.6); pairs "
                f"{', '.join(f'{p:.2f}' for p in pairs)} "
                f"(spread {min(pairs):.2f}-{max(pairs):.2f}); {os.cpu_count()} CPUs, "
                f"load average {os.getloadavg()[0]:.1f}; best ratio {os.cpu_count()} free cores "
                f"allow at the CPU measured per rollout: {statistics.median(ceilings):.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
