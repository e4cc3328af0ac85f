"""A rollgym server's CPU per request on three HTTP servers: the lean cycle, uvicorn's, granian.

The same arithmetic environment as ``bench/server_cpu.py`` (``create_app``, telemetry off),
one process per way, in alternating rounds, CPU of each whole process (every thread: granian's
Rust runtime threads included) from ``/proc/<pid>/stat``:

- ``lean``: uvicorn with rollgym's default protocol (:mod:`rollgym.http.lean_server`);
- ``uvicorn``: the same with ``ROLLGYM_HTTP_SERVER=uvicorn`` (uvicorn's own request cycle);
- ``granian``: granian's embedded ASGI server (``granian.server.embed.Server``) in the
  process's own uvloop, one runtime thread.

granian is not a rollgym dependency: ``pip install granian`` first (or ``--granian-path DIR``
for a ``pip install --target DIR granian``).

    python bench/server_granian.py [-n 1000] [--rounds 10] [--granian-path DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

import server_ab
import server_cpu

SERVER = """
import asyncio, os, sys
from rollgym.builtins.envs.arithmetic import ArithmeticEnv
from rollgym.event_loop import loop_factory
from rollgym.http.server import create_app

port = int(sys.argv[1])
app = create_app(ArithmeticEnv.build("arith", {}))
if os.environ.get("SERVER_GRANIAN") == "1":
    from granian.constants import Interfaces
    from granian.log import LogLevels
    from granian.server.embed import Server

    server = Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI,
                    log_level=LogLevels.error, websockets=False, runtime_threads=1)
    asyncio.Runner(loop_factory=loop_factory()).run(server.serve())
else:
    import uvicorn
    from rollgym.http.bounded_reads import bounded_protocol

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, http=bounded_protocol(), lifespan="on", ws="none")
    asyncio.Runner(loop_factory=loop_factory()).run(uvicorn.Server(config).serve())
"""


async def main_async(n: int, rounds: int, granian_path: str | None) -> None:
    granian_env = {"SERVER_GRANIAN": "1"}
    if granian_path:
        granian_env["PYTHONPATH"] = os.pathsep.join(
            [granian_path, *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    ways = {"lean": {}, "uvicorn": {"ROLLGYM_HTTP_SERVER": "uvicorn"}, "granian": granian_env}
    cpu, rate = await server_ab.compare(
        SERVER, ways, server_cpu._round, n=n, rounds=rounds, warm=300, requests_per_unit=2
    )
    print(f"load average {os.getloadavg()[0]:.1f}; {n} rollouts (2 requests each) x {rounds}")
    server_ab.report(cpu, rate, "lean", "uvicorn")  # every way's line, then uvicorn / lean
    ratio = statistics.median(cpu["granian"]) / statistics.median(cpu["lean"])
    print(f"CPU per request granian / lean: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--granian-path", help="a folder granian was pip-installed into")
    args = parser.parse_args()
    asyncio.run(main_async(args.n, args.rounds, args.granian_path))


if __name__ == "__main__":
    main()
