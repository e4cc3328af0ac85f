"""Driver throughput vs a bare aiohttp loop, same bodies, same agent, same concurrency.

Both post ``{"q": i, "task_index": i, "rollout_index": 0, "attempt": 0}`` to the same minimal
loopback agent (a separate process) at concurrency 64; measurements are interleaved so drift of
the machine affects both. Prints each rate and the ratio driver / bare (target >= 0.8).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minimal_agent import AgentProcess  # noqa: E402

from rollgym import (
    Collector,  # noqa: E402
    event_loop,  # noqa: E402
)

CONCURRENCY = 64


async def bare_loop(url: str, n: int) -> float:
    """The reference: 64 tasks posting JSON bytes through one pooled session."""
    connector = aiohttp.TCPConnector(limit=CONCURRENCY, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        counter = iter(range(n))
        headers = {"Content-Type": "application/json"}

        async def worker() -> None:
            for i in counter:
                body = orjson.dumps({"q": i, "task_index": i, "rollout_index": 0, "attempt": 0})
                async with session.post(url + "/run", data=body, headers=headers) as resp:
                    data = orjson.loads(await resp.read())
                    assert data["reward"] == 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return n / (time.perf_counter() - start)


async def driver(url: str, n: int) -> float:
    """The same work through the Collector, in the callback form the CLI job uses: rows,
    admission, retry, dispatch, classification, one record per rollout."""
    async with Collector({"agent": url}, agent="agent", concurrency=CONCURRENCY) as collector:
        done = 0

        def record(outcome: object) -> None:
            nonlocal done
            assert outcome.reward == 1  # type: ignore[attr-defined]
            done += 1

        start = time.perf_counter()
        await collector.run(({"q": i} for i in range(n)), record)
        assert done == n
        return n / (time.perf_counter() - start)


async def driver_stream(url: str, n: int) -> float:
    """The library's ``async for`` form (one hand-over to the consumer task per rollout)."""
    async with Collector({"agent": url}, agent="agent", concurrency=CONCURRENCY) as collector:
        start = time.perf_counter()
        done = 0
        async for outcome in collector.stream({"q": i} for i in range(n)):
            assert outcome.reward == 1  # type: ignore[union-attr]
            done += 1
        assert done == n
        return n / (time.perf_counter() - start)


async def measure(url: str, n: int, rounds: int) -> tuple[list[float], list[float], list[float]]:
    await bare_loop(url, min(n, 2000))  # warm every path up
    await driver(url, min(n, 2000))
    await driver_stream(url, min(n, 2000))
    bare, ours, streamed = [], [], []
    for _ in range(rounds):
        bare.append(await bare_loop(url, n))
        ours.append(await driver(url, n))
        streamed.append(await driver_stream(url, n))
    return bare, ours, streamed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3,000 rollouts x 5 rounds")
    parser.add_argument("-n", type=int, default=20_000, help="rollouts per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, rounds = (3_000, 5) if args.quick else (args.n, args.rounds)
    with AgentProcess() as agent:
        bare, ours, streamed = event_loop.run(measure(agent.url, n, rounds))
    b, d = statistics.median(bare), statistics.median(ours)
    pairwise = statistics.median(o / r for o, r in zip(ours, bare, strict=True))
    print(
        f"rollouts per measurement: {n}, concurrency {CONCURRENCY}, rounds {rounds} (interleaved)"
    )
    print(f"bare aiohttp loop: {' '.join(f'{x:,.0f}' for x in bare)} /s (median {b:,.0f})")
    s = statistics.median(streamed)
    print(f"rollgym driver:    {' '.join(f'{x:,.0f}' for x in ours)} /s (median {d:,.0f})")
    print(f"Collector.stream:  {' '.join(f'{x:,.0f}' for x in streamed)} /s (median {s:,.0f})")
    print(
        f"ratio driver/bare: {d / b:.2f} of medians, {pairwise:.2f} median of adjacent pairs (target >= 0.80)"
    )


if __name__ == "__main__":
    main()
