"""Two rollgym server processes side by side: the loop the server-CPU benchmarks share.

``bench/http_parser.py`` (httptools vs h11) and ``bench/server_cpu.py`` (one environment
variable changed) both start one copy of a small server per "way", each in its own process
with that way's environment, play the same requests against each in alternating rounds over
one kept-alive aiohttp pool, and read each server's CPU from ``/proc/<pid>/stat``: the ratio
of CPU per request is the figure (wall rates follow the load on a shared machine).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import aiohttp

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
CONCURRENCY = 32

#: One round against one server: (session, base URL, units) -> units' requests per second.
Round = Callable[[aiohttp.ClientSession, str, int], Awaitable[float]]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ready(url: str) -> None:
    """Wait until ``url`` answers ``/health`` (at most a minute)."""
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


async def compare(
    server: str,
    ways: Mapping[str, Mapping[str, str]],
    play: Round,
    *,
    n: int,
    rounds: int,
    warm: int,
    requests_per_unit: int = 1,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each way's server CPU per request and rate per round: ``server`` (Python source run
    with the port as its argument) started once per way with that way's environment added."""
    procs: dict[str, subprocess.Popen[str]] = {}
    urls: dict[str, str] = {}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    rate: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for way, extra in ways.items():
            port = free_port()
            procs[way] = subprocess.Popen(
                [sys.executable, "-c", server, str(port)], env={**os.environ, **extra}, text=True
            )
            urls[way] = f"http://127.0.0.1:{port}"
        for way in ways:
            await ready(urls[way])
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector) as session:
            for way in ways:
                await play(session, urls[way], warm)
            for i in range(rounds):
                for way in list(ways) if i % 2 == 0 else list(reversed(list(ways))):
                    before = cpu_s(procs[way].pid)
                    rate[way].append(await play(session, urls[way], n))
                    cpu[way].append((cpu_s(procs[way].pid) - before) / (requests_per_unit * n))
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    return cpu, rate


def print_rounds(label: str, per_request: list[float], extra: str = "") -> None:
    """One way's line: the median CPU per request and every round's."""
    print(
        f"{label} CPU per request {statistics.median(per_request) * 1e6:7.1f} us "
        f"(rounds {', '.join(f'{c * 1e6:.0f}' for c in per_request)}){extra}"
    )


def report(
    cpu: Mapping[str, list[float]], rate: Mapping[str, list[float]], baseline: str, other: str
) -> None:
    """Each way's server CPU per request, then the ratio other / baseline of the medians."""
    for way in cpu:
        print_rounds(
            f"{way:7s} server", cpu[way], f", median {statistics.median(rate[way]):.0f} requests/s"
        )
    ratio = statistics.median(cpu[other]) / statistics.median(cpu[baseline])
    print(f"CPU per request {other} / {baseline}: {ratio:.2f}")
