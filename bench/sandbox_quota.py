"""What the per-sandbox disk quota costs: sandboxes with their own tmpfs vs without.

Two pools side by side in one run, alternating rounds so both see the same machine load:
one with ``use_tmpfs=True`` (a tmpfs of ``disk_mb`` mounted per sandbox, ``/tmp`` and
``/dev/shm`` in it, a fullness check and a scratch reset around every exec) and one with
``use_tmpfs=False`` (``bwrap --size`` tmpfs for the scratch directories, ``/work`` a plain
directory). Prints, per side, the median time of a sandbox's create + destroy and of one exec
of ``true``, and the ratios tmpfs / plain. Needs a server that may mount (root); otherwise
both sides are the same and it says so.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rollgym.sandbox import SandboxLimits, SandboxPool  # noqa: E402

LIMITS = SandboxLimits(wall_s=30, disk_mb=64)


async def cycle_round(pool: SandboxPool, count: int) -> float:
    """Median seconds of acquire + release of a cold sandbox (the pool keeps none warm)."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        sandbox = await pool.acquire()
        await pool.release(sandbox)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def exec_round(pool: SandboxPool, count: int) -> float:
    """Median seconds of one exec of ``true`` in one sandbox."""
    sandbox = await pool.acquire()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        result = await sandbox.exec(["true"])
        assert result.ok, result
        times.append(time.perf_counter() - start)
    await pool.release(sandbox)
    return statistics.median(times)


async def main(count: int, rounds: int) -> None:
    pools = {
        "tmpfs": SandboxPool(LIMITS, warm=0, use_cgroups=False, use_tmpfs=True),
        "plain": SandboxPool(LIMITS, warm=0, use_cgroups=False, use_tmpfs=False),
    }
    for pool in pools.values():
        await pool.start()
    if not pools["tmpfs"].tmpfs_quota:
        print("this process may not mount: both sides run without a tmpfs per sandbox")
    cycles: dict[str, list[float]] = {name: [] for name in pools}
    execs: dict[str, list[float]] = {name: [] for name in pools}
    try:
        for _ in range(rounds):
            for name, pool in pools.items():
                cycles[name].append(await cycle_round(pool, count))
                execs[name].append(await exec_round(pool, count))
    finally:
        for pool in pools.values():
            await pool.close()
    for name in pools:
        print(
            f"{name:6s} create+destroy {statistics.median(cycles[name]) * 1e3:7.2f} ms"
            f"   exec {statistics.median(execs[name]) * 1e3:7.2f} ms"
        )
    cycle_ratio = statistics.median(cycles["tmpfs"]) / statistics.median(cycles["plain"])
    exec_ratio = statistics.median(execs["tmpfs"]) / statistics.median(execs["plain"])
    print(f"ratio tmpfs/plain: create+destroy {cycle_ratio:.2f}x, exec {exec_ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40, help="operations per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.count, args.rounds))
