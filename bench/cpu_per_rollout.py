"""CPU per single-turn rollout across every process of a run, at the margin of two run sizes.

Runs ``rollgym run`` on a single-turn job (agent ``single_turn`` on environment
``arithmetic``, model ``simulated`` at a fixed 20 ms) with a small and a large input,
alternating over the rounds. The CPU of a run is its whole process tree's, exactly
(``wait4`` on the command, which reaps every server and the trace store); the marginal CPU per
rollout is ``(large - small) / (rows_large - rows_small)``, so start-up and shut-down cancel.
Where the samples add up to more than ``wait4`` reports (a process re-parented away from the
tree and never waited for: its CPU is lost to ``wait4``), the samples' sum is used and a line
says so.
The breakdown by process comes from sampling ``/proc/<pid>/stat`` of every descendant every
``--sample-s`` (a process's last interval before it exits is missed, the same in both sizes);
each is named by its server instance (``_ROLLGYM_SERVER_SPEC``) or its command.

    python bench/cpu_per_rollout.py --small 200 --large 1200 --rounds 2
    python bench/cpu_per_rollout.py --against ROLLGYM_HTTP_PARSER=h11   # default vs h11, A/B

``--against KEY=VALUE`` runs every size twice per round, as is and with that variable set in
the run's environment (alternating), and prints both margins and their ratio side by side.

Target: at most 2 ms a rollout. On a loaded machine CPU seconds stay meaningful where wall
time does not; say the load average with the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _jobs import arithmetic_servers, server_stack, write_job

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_INSTANCE = re.compile(rb'"name": "([^"]+)"')


def _config(root: Path, telemetry: str) -> Path:
    config = {
        "run": {"agent": "solver", "concurrency": 64, "max_attempts": 1, "timeout_s": 120},
        "servers": arithmetic_servers(0.02, accuracy=0.8),
        "telemetry": {"preset": telemetry},
    }
    return write_job(root, config)


def _rows(root: Path, n: int) -> Path:
    path = root / f"rows-{n}.jsonl"
    with path.open("w") as out:
        for i in range(n):
            out.write(json.dumps({"a": i % 97, "b": (i * 7) % 89, "op": "add"}) + "\n")
    return path


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(x) for x in handle.read().split()]
    except OSError:
        return []


def _name(pid: int) -> str:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    args = [a.decode(errors="replace") for a in cmdline if a]
    module = args[args.index("-m") + 1] if "-m" in args[:-1] else " ".join(args[1:3])[:40]
    if module == "rollgym.start_gate" and len(args) > args.index("-m") + 3:
        module = args[args.index("-m") + 3]  # ``-m rollgym.start_gate FD MODULE ...`` runs MODULE
    if module == "rollgym.servers.server_process":
        found = _INSTANCE.search(environ)
        return f"server {found.group(1).decode() if found else '?'}"
    if module == "rollgym.telemetry.pipeline.child":
        return "span shipper (per process)"
    if module == "rollgym.cli.traces":  # the store: ``rollgym traces serve``
        return "trace store"
    joined = " ".join(args)
    if "multiprocessing" in joined:
        return "trace store workers" if "spawn_main" in joined else "multiprocessing helper"
    if module == "rollgym":
        return "driver"
    return module


def _forked_named(
    last: dict[int, tuple[str, float]], parent: dict[int, int], out: Path
) -> dict[int, tuple[str, float]]:
    """Names for processes forked without exec, whose command line is their parent's: the
    fork server's servers (by ``servers.jsonl``, which lists each server's pid) and each
    process's span exporter child (a child showing its parent's command line)."""
    servers: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for line in (out / "servers.jsonl").read_text().splitlines():
            record = json.loads(line)
            if isinstance(record.get("pid"), int) and record.get("instance"):
                servers[record["pid"]] = f"server {str(record['instance']).split('@')[0]}"
    forkers = {parent[pid] for pid in servers if pid in parent}
    named: dict[int, tuple[str, float]] = {}
    for pid, (name, cpu) in last.items():
        if pid in servers:
            name = servers[pid]
        elif pid in forkers and name.startswith("server"):  # not the driver, which adopts them
            name = "fork server"
        else:
            up = parent.get(pid)
            if up in servers or (up in last and last[up][0] == name):
                name = "span shipper (per process)"
        named[pid] = (name, cpu)
    return named


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S


def one_run(
    root: Path, config: Path, rows: Path, sample_s: float, env: dict[str, str] | None = None
) -> tuple[float, dict[str, float]]:
    """The tree's CPU seconds (exact) and the sampled CPU by process name."""
    out = tempfile.mkdtemp(prefix="run-", dir=root)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rollgym",
            "run",
            str(config),
            f"run.input={rows}",
            f"run.output_dir={out}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    last: dict[int, tuple[str, float]] = {}
    parent: dict[int, int] = {}
    while True:
        finished, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if finished:
            break
        pending = [proc.pid]
        while pending:
            pid = pending.pop()
            cpu = _cpu_s(pid)
            if cpu is not None:
                # named afresh each time: just after fork a child still shows the driver's
                # command line, until it execs
                name = _name(pid)
                if name == "?" and pid in last:  # it is exiting: keep what it was
                    name = last[pid][0]
                last[pid] = (name, cpu)
            children = _children(pid)
            parent.update((child, pid) for child in children)
            pending.extend(children)
        time.sleep(sample_s)
    last = _forked_named(last, parent, Path(out))
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rollgym run exited {proc.returncode} (see {out}/logs)")
    by_name: dict[str, float] = defaultdict(float)
    for name, cpu in last.values():
        by_name[name] += cpu
    reaped = usage.ru_utime + usage.ru_stime
    sampled = sum(by_name.values())
    if sampled > reaped:
        # A process that ended after its parent (re-parented away, never waited for) is not
        # in wait4's figure; the samples saw it, all but its last interval.
        print(f"  ({sampled - reaped:.2f} s of CPU not reaped into wait4: the samples' sum used)")
        return sampled, dict(by_name)
    return reaped, dict(by_name)


def _against(args: argparse.Namespace) -> None:
    """As is vs with ``args.against`` set, alternating, each at both sizes: margins side by side."""
    key, _, value = args.against.partition("=")
    ways = {"as is": {}, args.against: {key: value}}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rollgym-cpu-") as tmp:
        root = Path(tmp)
        config = _config(root, args.telemetry)
        sizes = {args.small: _rows(root, args.small), args.large: _rows(root, args.large)}
        cpu: dict[tuple[str, int], list[float]] = {(w, n): [] for w in ways for n in sizes}
        split: dict[tuple[str, int], list[dict[str, float]]] = {k: [] for k in cpu}
        for i in range(args.rounds):
            order = list(ways) if i % 2 == 0 else list(reversed(ways))
            for way in order:
                for n in sizes:
                    total, by_name = one_run(root, config, sizes[n], args.sample_s, ways[way])
                    cpu[way, n].append(total)
                    split[way, n].append(by_name)
                    print(f"round {i + 1}: {way}: {n} rows: {total:.2f} s", flush=True)
    print(f"load average at start {load:.1f}, now {os.getloadavg()[0]:.1f}")
    margin = args.large - args.small
    per: dict[str, float] = {}
    for way in ways:
        small = statistics.median(cpu[way, args.small])
        large = statistics.median(cpu[way, args.large])
        per[way] = (large - small) / margin
        print(f"{way:32s} marginal CPU per rollout {per[way] * 1000:.2f} ms")
    print(f"ratio {args.against} / as is: {per[args.against] / per['as is']:.2f}")
    # Which processes the difference is in (sampled: each process's last interval is missed).
    names = sorted({name for runs in split.values() for by in runs for name in by})
    print(f"by process (sampled), marginal ms per rollout: {'as is':>8s} {'against':>8s}")
    for name in names:
        row = []
        for way in ways:
            s = statistics.median(by.get(name, 0.0) for by in split[way, args.small])
            big = statistics.median(by.get(name, 0.0) for by in split[way, args.large])
            row.append((big - s) / margin * 1000)
        print(f"  {name:32s} {row[0]:8.2f} {row[1]:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--telemetry", default="default", help="telemetry.preset of the job")
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--against", metavar="KEY=VALUE", help="A/B: as is vs with KEY=VALUE set")
    args = parser.parse_args()
    print(f"{server_stack()} (as is)", flush=True)
    if args.against:
        _against(args)
        return
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rollgym-cpu-") as tmp:
        root = Path(tmp)
        config = _config(root, args.telemetry)
        sizes = {args.small: _rows(root, args.small), args.large: _rows(root, args.large)}
        runs: dict[int, list[tuple[float, dict[str, float]]]] = {n: [] for n in sizes}
        for i in range(args.rounds):
            order = [args.small, args.large] if i % 2 == 0 else [args.large, args.small]
            for n in order:
                runs[n].append(one_run(root, config, sizes[n], args.sample_s))
                print(f"round {i + 1}: {n} rows: {runs[n][-1][0]:.2f} s CPU", flush=True)
    margin = args.large - args.small
    small = statistics.median(r[0] for r in runs[args.small])
    large = statistics.median(r[0] for r in runs[args.large])
    print(f"load average at start {load:.1f}, now {os.getloadavg()[0]:.1f}")
    print(f"CPU of the whole tree: {small:.2f} s ({args.small} rows), {large:.2f} s ({args.large})")
    per_rollout = (large - small) / margin
    print(f"marginal CPU per rollout (target <= 2 ms): {per_rollout * 1000:.2f} ms")
    print(f"fixed CPU (start-up and shut-down): {small - per_rollout * args.small:.2f} s")
    names = sorted({name for n in runs for _, by in runs[n] for name in by})
    print("by process (sampled), marginal ms per rollout:")
    for name in names:
        s = statistics.median(by.get(name, 0.0) for _, by in runs[args.small])
        big = statistics.median(by.get(name, 0.0) for _, by in runs[args.large])
        print(f"  {name:32s} {(big - s) / margin * 1000:6.2f}   ({s:.2f} s / {big:.2f} s)")


if __name__ == "__main__":
    main()
