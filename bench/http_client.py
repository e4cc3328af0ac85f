"""The client side of rollgym's JSON exchanges: CPU per request, lean client vs aiohttp.

One small rollgym server (``create_app``, telemetry off, httptools) runs in a child process;
this process posts the same rows to it through :class:`rollgym.http.client.HttpClient` in
alternating rounds, once as is (plain ``http://`` exchanges on :mod:`rollgym.http.lean`) and
once with ``ROLLGYM_HTTP_CLIENT=aiohttp`` (every exchange through aiohttp's
``ClientSession``), at concurrency 32. The figure is this process's CPU per request
(``time.process_time``: the client alone; the server's CPU is in its own process, printed
too), as a ratio of medians; wall rates are printed but follow the machine's load.

    python bench/http_client.py [-n 5000] [--rounds 4]

``--against-src DIR`` compares two versions of the lean client instead: each round starts two
child processes, one importing rollgym from this tree's ``src`` and one from ``DIR`` (another
checkout's ``src``), in alternating order, each posting ``n`` rows through ``HttpClient`` to the
same server after a warm-up; the figure is each child's own CPU per request over those rows
(its start-up and warm-up excluded), as a ratio of medians.

    python bench/http_client.py --against-src /path/to/other/src [-n 5000] [--rounds 6]

``--timeout S`` gives every request a time limit of ``S`` seconds, as a server's rollout calls
have (``request_timeout_s``), so the cost of enforcing one is in the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from http_parser import SERVER
from server_ab import cpu_s as _cpu_s
from server_ab import free_port as _free_port
from server_ab import print_rounds
from server_ab import ready as _ready

from rollgym.event_loop import loop_factory
from rollgym.http.client import HttpClient
from rollgym.http.lean import ENV_CLIENT

CONCURRENCY = 32
WAYS = {"lean": "", "aiohttp": "aiohttp"}
#: Each request's time limit (``--timeout``); None: none, as the driver's posts without one.
TIMEOUT: float | None = None


async def _round(url: str, n: int, way: str) -> tuple[float, float]:
    """Post ``n`` rows at CONCURRENCY through a fresh client; (client CPU s, wall s)."""
    os.environ[ENV_CLIENT] = WAYS[way]
    async with HttpClient(limit=CONCURRENCY) as client:
        todo = iter(range(n))

        async def worker() -> None:
            for i in todo:
                body = {"q": i, "pad": "x" * 200}
                answer = await client.post_json("echo", url + "/run", body, timeout=TIMEOUT)
                if answer.status != 200 or answer.data["q"] != i:
                    raise SystemExit(f"{way}: HTTP {answer.status} {answer.text}")

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return time.process_time() - cpu, time.perf_counter() - wall


async def main_async(n: int, rounds: int) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    cpu: dict[str, list[float]] = {way: [] for way in WAYS}
    rate: dict[str, list[float]] = {way: [] for way in WAYS}
    served: dict[str, list[float]] = {way: [] for way in WAYS}
    load = os.getloadavg()[0]
    try:
        await _ready(url)
        for way in WAYS:
            await _round(url, 500, way)  # warm both paths
        for i in range(rounds):
            for way in list(WAYS) if i % 2 == 0 else list(reversed(WAYS)):
                before = _cpu_s(server.pid)
                used, wall = await _round(url, n, way)
                served[way].append((_cpu_s(server.pid) - before) / n)
                cpu[way].append(used / n)
                rate[way].append(n / wall)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {n} x {rounds} each")
    for way in WAYS:
        print_rounds(
            f"{way:8s} client",
            cpu[way],
            f"; server {statistics.median(served[way]) * 1e6:.0f} us;"
            f" {statistics.median(rate[way]):.0f}/s",
        )
    ratio = statistics.median(cpu["aiohttp"]) / statistics.median(cpu["lean"])
    print(f"client CPU per request aiohttp / lean: {ratio:.2f}")


async def _child_async(url: str, n: int) -> None:
    """One child's round (``--child``): warm up, then print its client CPU seconds for ``n``."""
    await _round(url, 500, "lean")
    used, _ = await _round(url, n, "lean")
    print(f"{used:.6f}")


def _child_cpu(src: str, url: str, n: int) -> float:
    """Client CPU seconds of ``n`` requests in a child importing rollgym from ``src``."""
    env = {**os.environ, "PYTHONPATH": src}
    env.pop(ENV_CLIENT, None)
    limit = [] if TIMEOUT is None else ["--timeout", str(TIMEOUT)]
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, "-n", str(n), *limit],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"child with PYTHONPATH={src} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.split()[-1])


async def against_src_async(other: str, n: int, rounds: int) -> None:
    """This tree's lean client against ``other``'s, in child processes, alternating."""
    sides = {"this": str(Path(__file__).resolve().parents[1] / "src"), "other": other}
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    load = os.getloadavg()[0]
    try:
        await _ready(url)
        for i in range(rounds):
            for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
                used = await asyncio.to_thread(_child_cpu, sides[side], url, n)
                cpu[side].append(used / n)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {n} x {rounds} each")
    for side, src in sides.items():
        print_rounds(f"{side:6s} {src}: client", cpu[side])
    ratio = statistics.median(cpu["other"]) / statistics.median(cpu["this"])
    print(f"client CPU per request other / this: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--against-src", metavar="DIR", help="another checkout's src to compare")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, help="each request's time limit, seconds")
    args = parser.parse_args()
    global TIMEOUT
    TIMEOUT = args.timeout
    runner = asyncio.Runner(loop_factory=loop_factory())
    if args.child:
        runner.run(_child_async(args.child, args.n))
    elif args.against_src:
        if not (Path(args.against_src) / "rollgym").is_dir():
            raise SystemExit(f"--against-src {args.against_src}: no rollgym package there")
        runner.run(against_src_async(args.against_src, args.n, args.rounds))
    else:
        runner.run(main_async(args.n, args.rounds))


if __name__ == "__main__":
    main()
