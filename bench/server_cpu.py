"""A rollgym server's CPU per request, as is vs with one environment variable changed.

Two copies of the built-in ``arithmetic`` environment (``create_app``: the same middleware,
body limit and error handlers as every rollgym server), each a separate process serving with
uvicorn on the bounded protocol, telemetry off: one as is, one with ``--against KEY=VALUE``
in its environment. The default, ``ROLLGYM_HOT_ROUTES=starlette``, compares the plain routes'
POSTs dispatched straight to their endpoint (:mod:`rollgym.http.hot_routes`) with every
request through Starlette's router; ``--against ROLLGYM_HTTP_SERVER=uvicorn`` compares the
servers' lean request cycle (:mod:`rollgym.http.lean_server`) with uvicorn's own;
``--against PYTHONPATH=<other checkout>/src`` compares
two versions of the code; ``--against 'SERVER_CPU_UVICORN_OPTIONS={"proxy_headers": false}'``
compares uvicorn's own options (``uvicorn.Config`` keywords as JSON). The bench plays
the environment's side of single-turn rollouts against each in alternating rounds, one
``/seed_session`` and one ``/verify`` per rollout, over a kept-alive aiohttp pool
(concurrency 32), and reads each server's CPU from ``/proc/<pid>/stat``: the ratio of CPU per
request is the figure (wall rates follow the load on a shared machine).

    python bench/server_cpu.py [-n 3000] [--rounds 4] [--against KEY=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import aiohttp
import server_ab
from _jobs import server_stack
from server_ab import CONCURRENCY

SERVER = """
import asyncio, json, os, sys
import uvicorn
from rollgym.builtins.envs.arithmetic import ArithmeticEnv
from rollgym.event_loop import loop_factory
from rollgym.http.bounded_reads import bounded_protocol
from rollgym.http.server import create_app

config = uvicorn.Config(
    create_app(ArithmeticEnv.build("arith", {})),
    host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False,
    http=bounded_protocol(), lifespan="on",
    **json.loads(os.environ.get("SERVER_CPU_UVICORN_OPTIONS") or "{}"),
)
asyncio.Runner(loop_factory=loop_factory()).run(uvicorn.Server(config).serve())
"""


async def _round(session: aiohttp.ClientSession, url: str, n: int) -> float:
    """Play ``n`` rollouts' seed + verify at CONCURRENCY; the requests per second."""
    todo = iter(range(n))

    async def post(path: str, body: dict[str, object]) -> dict[str, object]:
        async with session.post(url + path, json=body) as answer:
            if answer.status != 200:
                raise SystemExit(f"{url}{path}: HTTP {answer.status}: {await answer.text()}")
            got: dict[str, object] = await answer.json()
            return got

    async def worker() -> None:
        for i in todo:
            task = {"a": i, "b": 7, "op": "add"}
            seeded = await post("/seed_session", {"rollout_id": f"{i}-0", "task": task})
            verdict = await post(
                "/verify", {"session_id": seeded["session_id"], "answer": f"Answer: {i + 7}"}
            )
            if verdict["reward"] != 1.0:
                raise SystemExit(f"{url}: wrong verdict {verdict}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return 2 * n / (time.perf_counter() - start)


async def main_async(n: int, rounds: int, against: str) -> None:
    key, _, value = against.partition("=")
    ways = {"as is": {}, "against": {key: value}}
    cpu, rate = await server_ab.compare(
        SERVER, ways, _round, n=n, rounds=rounds, warm=300, requests_per_unit=2
    )
    print(
        f"load average {os.getloadavg()[0]:.1f}; {n} rollouts (2 requests each) x {rounds}; "
        f"against: {against}; {server_stack()} (as is)"
    )
    server_ab.report(cpu, rate, "as is", "against")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--against", default="ROLLGYM_HOT_ROUTES=starlette", help="KEY=VALUE")
    args = parser.parse_args()
    if "=" not in args.against:
        parser.error(f"--against: expected KEY=VALUE, got {args.against!r}")
    asyncio.run(main_async(args.n, args.rounds, args.against))


if __name__ == "__main__":
    main()
