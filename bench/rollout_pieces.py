"""The per-rollout pieces of the agent, environment and model servers' own Python, side by side.

Each piece is one thing a single-turn rollout does in a server's own code, timed in a loop (the
best of several repeats, microseconds a call): the lean client's request target and the HTTP
client span's attributes for a rollout-scoped URL never seen before (every model call's case),
reading an incoming ``traceparent``, the arithmetic's ``evaluate`` of a task's expression, the
simulated policy's reply, the arithmetic environment's seed and verify, and a request's
``Server-Timing`` scope.

    python bench/rollout_pieces.py --against-src /path/to/other/src [--rounds 4]

Each round starts one child process importing rollgym from this tree's ``src`` and one from the
other ``src``, in alternating order; the figure per piece is the ratio of medians (other /
this). Absolute times follow the machine's load; the ratios are what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

N = 5000
REPEATS = 7


def _best(make: Callable[[], Callable[[], object]], reset: Callable[[], None]) -> float:
    """Microseconds a call, the best of :data:`REPEATS` loops of :data:`N` (a fresh ``make()``
    and ``reset()`` before each, so every loop sees new URLs and an empty cache)."""
    times = []
    for _ in range(REPEATS):
        call = make()
        reset()
        times.append(timeit.timeit(call, number=N) / N * 1e6)
    return min(times)


def _pieces() -> dict[str, float]:
    """Every piece's microseconds a call, in this process (the child's work)."""
    import random

    from rollgym import server_timing
    from rollgym.builtins.arith import evaluate
    from rollgym.builtins.envs.arithmetic import ArithmeticEnv
    from rollgym.builtins.models.policy import _arithmetic
    from rollgym.http import lean
    from rollgym.telemetry import spans
    from rollgym.telemetry.context import extract_context

    def clear_evaluate() -> None:
        getattr(evaluate, "cache_clear", lambda: None)()

    def nothing() -> None:
        return None

    fresh = iter(range(10**9))

    def urls() -> Callable[[], str]:
        loop = next(fresh)
        numbers = iter(range(10**9))
        return lambda: f"http://127.0.0.1:4567/r/{loop}x{next(numbers)}-0-a0/v1/chat/completions"

    def target() -> Callable[[], object]:
        url = urls()
        return lambda: lean.target(url())

    def attributes() -> Callable[[], object]:
        url = urls()
        route = "/r/{rollout_id}/v1/chat/completions"
        return lambda: spans._client_attributes("POST", "policy", url(), route)

    headers = {
        "host": "127.0.0.1:4567",
        "content-type": "application/json",
        "content-length": "180",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-request-id": "3-0-a0.0",
    }
    expressions = [f"{i % 97} + {(i * 7) % 89}" for i in range(N)]

    def evaluating() -> Callable[[], object]:
        todo = iter(expressions)
        return lambda: evaluate(next(todo))

    rng = random.Random(1)

    def replying() -> Callable[[], object]:
        todo = iter(expressions)
        return lambda: _arithmetic(
            [{"role": "user", "content": f"Compute: {next(todo)}\nReply"}], True, rng
        )

    env = ArithmeticEnv.build("arith", {})

    async def seed_and_verify(i: int) -> object:
        state = await env.seed({"a": i % 97, "b": (i * 7) % 89, "op": "add"})
        return await env.verify(state, f"Answer: {i % 97 + (i * 7) % 89}")

    def environment() -> Callable[[], object]:
        todo = iter(range(N))

        def once() -> None:
            step = seed_and_verify(next(todo))
            try:
                step.send(None)  # nothing in either awaits: it finishes in one step
            except StopIteration:
                return

        return once

    def scope() -> object:
        with server_timing.collecting() as timings:
            server_timing.note(server_timing.ENGINE, 0.01)
        return timings.header()

    return {
        "lean target, new scoped URL": _best(target, nothing),
        "client span attributes, new scoped URL": _best(attributes, nothing),
        "traceparent in (extract_context)": _best(
            lambda: lambda: extract_context(headers), nothing
        ),
        "arithmetic evaluate": _best(evaluating, clear_evaluate),
        "simulated policy's arithmetic reply": _best(replying, clear_evaluate),
        "arithmetic environment seed + verify": _best(environment, clear_evaluate),
        "Server-Timing scope (collecting)": _best(lambda: scope, nothing),
    }


def _child(src: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"child with PYTHONPATH={src} failed: {done.stderr.strip()[-800:]}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against-src", metavar="DIR", help="another checkout's src")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_pieces()))
        return
    if not args.against_src or not (Path(args.against_src) / "rollgym").is_dir():
        raise SystemExit("--against-src DIR: another checkout's src, with a rollgym package")
    sides = {"this": str(Path(__file__).resolve().parents[1] / "src"), "other": args.against_src}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    load = os.getloadavg()[0]
    for i in range(args.rounds):
        for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
            runs[side].append(_child(sides[side]))
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {args.rounds} rounds")
    print(f"{'us a call, median of rounds':42s} {'this':>8s} {'other':>8s} {'other/this':>11s}")
    for piece in runs["this"][0]:
        this = statistics.median(run[piece] for run in runs["this"])
        other = statistics.median(run[piece] for run in runs["other"])
        print(f"{piece:42s} {this:8.2f} {other:8.2f} {other / this:11.2f}")


if __name__ == "__main__":
    main()
