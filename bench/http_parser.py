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
import time

import aiohttp
import server_ab
from server_ab import CONCURRENCY

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
    cpu, rate = await server_ab.compare(SERVER, ways, _round, n=n, rounds=rounds, warm=500)
    print(f"load average {os.getloadavg()[0]:.1f}; {n} requests x {rounds} rounds each")
    server_ab.report(cpu, rate, "as is", "h11")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main_async(args.n, args.rounds))


if __name__ == "__main__":
    main()
