"""Where a single-turn rollout's CPU goes: every process of a run under cProfile, by stage.

Runs the job of ``bench/cpu_per_rollout.py`` (``single_turn`` agent, ``arithmetic``
environment, ``simulated`` model at a fixed 20 ms, default tracing) twice, with a small and a
large input, each with every Python process profiled (``_profile_site/sitecustomize.py`` on
PYTHONPATH: cProfile on each process's main thread, written at exit). Per process and per stage
(the library a function's own time is spent in: JSON, pydantic, HTTP parsing, the event loop,
telemetry, the store, ...) it prints the marginal profiled time per rollout, the large run's
minus the small run's over the difference in rows, so start-up and shut-down cancel; with
``--top`` the functions that cost most at the margin.

    python bench/profile_processes.py --small 200 --large 1200 [--top 15]

cProfile roughly doubles the time of Python-heavy code, so the absolute figures are inflated;
the shares are what to read. Times are CPU (each main thread's clock), not wall; threads
other than the main one are not seen.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_per_rollout import _config, _rows  # noqa: E402

#: (stage, substrings of a function's file or name), first match wins.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("json", ("/json/", "orjson", "<method 'dumps'", "<method 'loads'", "_json.")),
    ("pydantic", ("pydantic",)),
    ("http parsing (uvicorn, h11, httptools)", ("/uvicorn/", "/h11/", "httptools")),
    ("aiohttp (client, store server)", ("/aiohttp/", "/multidict/", "/yarl/", "propcache")),
    ("fastapi / starlette", ("/fastapi/", "/starlette/", "/anyio/")),
    ("opentelemetry", ("/opentelemetry/",)),
    ("rollgym telemetry", ("rollgym/telemetry/",)),
    ("trace store (decode, write, sqlite)", ("rollgym/tracestore/", "sqlite3", "protobuf")),
    ("logging", ("/logging/",)),
    ("event loop, sockets, select", ("/asyncio/", "uvloop", "selectors", "socket", "epoll")),
    ("rollgym (driver, servers, http)", ("rollgym/",)),
]


def _stage(key: tuple[str, int, str]) -> str:
    text = f"{key[0]}:{key[2]}"
    for stage, needles in STAGES:
        if any(n in text for n in needles):
            return stage
    return "other (interpreter builtins, stdlib)"


SHIPPERS = "span shippers (one per process)"


def _is_shipper(stats: pstats.Stats) -> bool:
    """A span exporter child forked from its process (no command line of its own): the one
    whose profile ran the child's ``serve`` loop."""
    raw: dict[tuple[str, int, str], object] = stats.stats  # type: ignore[attr-defined]
    return any(f.endswith("pipeline/child.py") and fn == "serve" for f, _, fn in raw)


def _process_name(meta: dict[str, object]) -> str:
    argv = " ".join(str(a) for a in meta.get("orig_argv", []))  # type: ignore[union-attr]
    if "pipeline.child" in argv:  # before the server name: a server's shipper inherits it
        return SHIPPERS
    if "--fork-server" in argv and not meta.get("server"):
        return "fork server (start-up only)"
    if meta.get("server"):
        return f"server {meta['server']}"
    if "tracestore" in argv:
        return "trace store"
    if "multiprocessing" in argv:
        return "trace store workers"
    if "-m rollgym run" in argv:
        return "driver"
    return argv[:60]


def profile_run(root: Path, config: Path, rows: Path) -> dict[str, pstats.Stats]:
    """One profiled ``rollgym run``: its processes' merged stats by process name."""
    out = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    prof = Path(tempfile.mkdtemp(prefix="prof-", dir=root))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE / "_profile_site"), env.get("PYTHONPATH", "")) if p
    )
    env["ROLLGYM_BENCH_PROFILE_DIR"] = str(prof)
    cmd = [sys.executable, "-m", "rollgym", "run", str(config), f"run.input={rows}"]
    done = subprocess.run(
        [*cmd, f"run.output_dir={out}"], env=env, stdout=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"rollgym run exited {done.returncode} (see {out}/logs)")
    merged: dict[str, pstats.Stats] = {}
    for cmd_file in sorted(prof.glob("*.cmd")):
        name = _process_name(json.loads(cmd_file.read_text()))
        stats_file = cmd_file.with_suffix(".prof")
        if not stats_file.exists():
            continue
        stats = pstats.Stats(str(stats_file))
        if _is_shipper(stats):  # forked from its server: same argv and spec, its own work
            name = SHIPPERS
        if name in merged:
            merged[name].add(stats)
        else:
            merged[name] = stats
    return merged


def _by_key(stats: pstats.Stats) -> dict[tuple[str, int, str], float]:
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = stats.stats  # type: ignore[attr-defined]
    return {key: value[2] for key, value in raw.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument("--telemetry", default="default", help="telemetry.preset of the job")
    parser.add_argument("--top", type=int, default=0, help="also the N costliest functions")
    parser.add_argument(
        "--top-of", default="", help="the costliest functions of processes whose name has this"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rollgym-prof-") as tmp:
        root = Path(tmp)
        config = _config(root, args.telemetry)
        small = profile_run(root, config, _rows(root, args.small))
        large = profile_run(root, config, _rows(root, args.large))
    margin = args.large - args.small
    print(f"load average at start {load:.1f}, now {os.getloadavg()[0]:.1f}")
    print(f"marginal profiled time per rollout (us), {args.small} vs {args.large} rows:")
    totals: dict[str, float] = {}
    functions: dict[tuple[str, tuple[str, int, str]], float] = {}
    for name in sorted(set(small) | set(large)):
        big = _by_key(large[name]) if name in large else {}
        few = _by_key(small[name]) if name in small else {}
        stages: dict[str, float] = defaultdict(float)
        for key in set(big) | set(few):
            delta = (big.get(key, 0.0) - few.get(key, 0.0)) / margin * 1e6
            stages[_stage(key)] += delta
            functions[(name, key)] = delta
        totals[name] = sum(stages.values())
        print(f"  {name:36s} {totals[name]:8.1f}")
        for stage, us in sorted(stages.items(), key=lambda kv: -kv[1]):
            if abs(us) >= 0.5:
                print(f"      {stage:40s} {us:8.1f}")
    print(f"  {'all processes':36s} {sum(totals.values()):8.1f}")
    if args.top:
        print(f"the {args.top} costliest functions at the margin (own time, us per rollout):")
        chosen = {k: v for k, v in functions.items() if args.top_of in k[0]}
        ranked = sorted(chosen.items(), key=lambda kv: -kv[1])[: args.top]
        for (name, (file, line, func)), us in ranked:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            print(f"  {us:7.1f}  {name[:20]:20s} {func[:40]:40s} {where[-50:]}")


if __name__ == "__main__":
    main()
