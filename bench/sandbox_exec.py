"""Sandbox exec throughput with the warm pool vs a bare ``subprocess.run`` of the same program.

Both sides run the same small Python program (``python3 -c`` summing a range) ``--execs``
times at concurrency 8: the bare side as ``subprocess.run`` on 8 threads (in a new session,
as a sandbox is: with the kernel's autogroup scheduling a session is its own CPU group, so
this keeps both sides equal on a machine that other work loads), the sandboxed side as
``Sandbox.exec`` from 8 rollouts, each holding one sandbox from a warm pool (bubblewrap, a
fresh namespace set and rlimits per exec, a cgroup per exec where available). Rounds
alternate bare / sandboxed so both see the same machine load; the ratio is of the medians
(target >= 0.5). Also prints the pool's start-up time (the bubblewrap check plus ``warm``
sandboxes prepared) and the time to acquire a warm sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rollgym.sandbox import SandboxLimits, SandboxPool, check_support  # noqa: E402

#: The same interpreter on both sides: the first python3 on the sandbox's PATH (a user's
#: shell might find a wrapper script such as a pyenv shim first, which would flatter the ratio).
PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"
PROGRAM = [PYTHON, "-c", "print(sum(range(200000)))"]
CONCURRENCY = 8


def bare_round(execs: int) -> float:
    """Execs per second of ``subprocess.run`` on CONCURRENCY threads."""
    with ThreadPoolExecutor(CONCURRENCY) as threads:
        start = time.perf_counter()
        done = list(
            threads.map(
                lambda _: subprocess.run(PROGRAM, capture_output=True, start_new_session=True),
                range(execs),
            )
        )
        elapsed = time.perf_counter() - start
    assert all(d.returncode == 0 for d in done)
    return execs / elapsed


async def sandbox_round(pool: SandboxPool, execs: int) -> float:
    """Execs per second of CONCURRENCY rollouts, each exec-ing in its own warm sandbox."""
    per_rollout = execs // CONCURRENCY

    async def rollout(index: int) -> None:
        sandbox = await pool.acquire(f"bench-{index}")
        try:
            for _ in range(per_rollout):
                result = await sandbox.exec(PROGRAM)
                assert result.ok, result
        finally:
            await pool.release(sandbox)

    start = time.perf_counter()
    await asyncio.gather(*(rollout(i) for i in range(CONCURRENCY)))
    return per_rollout * CONCURRENCY / (time.perf_counter() - start)


async def main(execs: int, rounds: int) -> None:
    check_support()
    started = time.perf_counter()
    pool = SandboxPool(SandboxLimits(wall_s=60), warm=CONCURRENCY, max_concurrent_execs=CONCURRENCY)
    await pool.start()
    startup = time.perf_counter() - started
    acquired = time.perf_counter()
    first = await pool.acquire("warm-check")
    acquire_ms = (time.perf_counter() - acquired) * 1000
    await pool.release(first)
    bare, boxed = [], []
    try:
        await sandbox_round(pool, CONCURRENCY)  # warm the page cache of both paths
        bare_round(CONCURRENCY)
        for _ in range(rounds):
            bare.append(await asyncio.to_thread(bare_round, execs))
            boxed.append(await sandbox_round(pool, execs))
    finally:
        await pool.close()
    ratio = statistics.median(boxed) / statistics.median(bare)
    print(
        f"program: {' '.join(PROGRAM)}; concurrency {CONCURRENCY}; {execs} execs x {rounds} rounds"
    )
    print(
        f"bare subprocess.run: median {statistics.median(bare):.1f} execs/s  {[round(b, 1) for b in bare]}"
    )
    print(
        f"warm-pool sandbox:   median {statistics.median(boxed):.1f} execs/s  {[round(b, 1) for b in boxed]}"
    )
    print(f"ratio sandbox/bare: {ratio:.2f} (target >= 0.5)")
    print(f"cgroup accounting: {'on' if pool.cgroup is not None else 'off (rlimits only)'}")
    print(f"pool start-up (check + {CONCURRENCY} warm sandboxes): {startup * 1000:.1f} ms; "
          f"acquire a warm sandbox: {acquire_ms:.2f} ms")  # fmt: skip
    print(f"execs counted {pool.stats.execs}, sandboxes created {pool.stats.created}, "
          f"destroyed {pool.stats.destroyed}")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execs", type=int, default=160, help="execs per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="48 execs x 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.execs, args.rounds = 48, 3
    asyncio.run(main(args.execs, args.rounds))
