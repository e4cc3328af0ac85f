"""A rollgym server's CPU per request on httptools vs h11, two servers side by side.

Two copies of one small rollgym agent server (``create_app``: the same middleware, body limit
and telemetry gate as every rollgym server, telemetry off), each a separate process serving
with uvicorn on the bounded protocol :func:`rollgym.http.bounded_reads.bounded_protocol`
picks: one as is (httptools where installed), one with ``ROLLGYM_HTTP_PARSER=h11``. The bench
posts the same rows to each in alternating rounds over a kept-alive aiohttp pool
(concurrency 32) and reads each server's CPU from ``/proc/<pid>/stat``: the ratio of CPU per
request is the figure (wall rates are printed, but on a shared machine they follow the load).

    python bench/http_parser.py [-n 5000] [--rounds 4]
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

import aiohttp

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
CONCURRENCY = 32

SERVER = """
import asyncio, sys
import uvicorn
from fastapi import FastAPI, Request
from rollgym.http.bounded_reads import bounded_protocol
from rollgym.http.server import OrjsonResponse
from rollgym.servers.answers import json_object
from rollgym.event_loop import loop_factory
from rollgym.servers.base import Server


class Echo(Server):
    kind = "agent"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/run")
        async def run(request: Request) -> OrjsonResponse:
            row = await json_object(request)
            return OrjsonResponse({"reward": 1.0, "q": row.get("q")})


server = Echo.build("echo", {})
config = uvicorn.Config(
    __import__("rollgym.http.server", fromlist=["create_app"]).create_app(server),
    host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False,
    http=bounded_protocol(), lifespan="on",
)
print(bounded_protocol().__name__, flush=True)
asyncio.Runner(loop_factory=loop_factory()).run(uvicorn.Server(config).serve())
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _ready(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            try:
                async with session.get(url + "/health") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} never answered /health")


async def _round(session: aiohttp.ClientSession, url: str, n: int) -> float:
    """Post ``n`` rows at CONCURRENCY; the rate."""
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            async with session.post(url + "/run", json={"q": i}) as answer:
                if answer.status != 200:
                    raise SystemExit(f"{url}: HTTP {answer.status}")
                await answer.read()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return n / (time.perf_counter() - start)


async def main_async(n: int, rounds: int) -> None:
    ways = {"as is": {}, "h11": {"ROLLGYM_HTTP_PARSER": "h11"}}
    procs: dict[str, subprocess.Popen[str]] = {}
    urls: dict[str, str] = {}
    try:
        for way, extra in ways.items():
            port = _free_port()
            procs[way] = subprocess.Popen(
                [sys.executable, "-c", SERVER, str(port)],
                env={**os.environ, **extra},
                stdout=subprocess.PIPE,
                text=True,
            )
            urls[way] = f"http://127.0.0.1:{port}"
        for way in ways:
            await _ready(urls[way])
            print(f"{way}: {procs[way].stdout.readline().strip()}")  # type: ignore[union-attr]
        cpu: dict[str, list[float]] = {w: [] for w in ways}
        rate: dict[str, list[float]] = {w: [] for w in ways}
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector) as session:
            for way in ways:
                await _round(session, urls[way], 500)  # warm
            for i in range(rounds):
                for way in list(ways) if i % 2 == 0 else list(reversed(ways)):
                    before = _cpu_s(procs[way].pid)
                    rate[way].append(await _round(session, urls[way], n))
                    cpu[way].append((_cpu_s(procs[way].pid) - before) / n)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(f"load average {os.getloadavg()[0]:.1f}; {n} requests x {rounds} rounds each")
    for way in ways:
        print(
            f"{way:6s} server CPU per request {statistics.median(cpu[way]) * 1e6:7.1f} us "
            f"(rounds {', '.join(f'{c * 1e6:.0f}' for c in cpu[way])}), "
            f"median {statistics.median(rate[way]):.0f} requests/s"
        )
    ratio = statistics.median(cpu["h11"]) / statistics.median(cpu["as is"])
    print(f"CPU per request h11 / as is: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main_async(args.n, args.rounds))


if __name__ == "__main__":
    main()
