"""An agent written with the OpenAI SDK beside the built-in ``single_turn``, 1,000 in flight each.

One real ``rollgym run`` job, so both agents meet the same machine at the same moment: a
simulated model (each generation held ``--latency`` seconds, no CPU), the arithmetic
environment, and 2 x N rows, every other one routed to each agent, all admitted at once
(``run.concurrency`` = 2 x N), telemetry on (the default preset, the local trace store), one
attempt each (so a timeout is not hidden by a retry):

- ``single_turn``: the built-in agent (``rollout.chat``, rollgym's own aiohttp client);
- ``sdk``: the documented SDK agent (bench/_sdk_agent.py: ``rollout.async_openai()``, a new
  ``AsyncOpenAI`` per rollout), making the same one model call (``--calls 2``: two).

It prints, per agent, completed/requested, the median rollout duration and the wall time
(its first rollout's start to its last one's end), then the ratios sdk / single_turn (target:
completed/requested 1.0 for both, wall-time ratio within 1.5x). ``--full``: 5,000 each.
``--replicas K`` serves each agent with K processes (both agents alike, so the comparison
stays fair). Last, ``rollgym traces check`` runs on the job's trace store: the trace contract
(no span of one rollout in another's trace) must hold for both agents at that concurrency.

``--construction`` prints instead what one rollout's SDK client costs to make, piece by
piece, against what a fresh ``AsyncOpenAI`` with its own transport costs; ``--per-call`` the
CPU of one model call through ``rollout.async_openai()`` against ``rollout.chat``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from _jobs import simulated_model, write_job

HERE = Path(__file__).resolve().parent


def _traces_check(out: Path) -> tuple[int, str]:
    """``rollgym traces check`` on the run: exit status and its verdict line (the trace
    contract: no span of one rollout in another's trace)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "check", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def _job(
    root: Path, n: int, latency: float, calls: int, window: bool = True, replicas: int = 1
) -> tuple[dict[str, dict[str, Any]], tuple[int, str]]:
    """One job, N rows for each agent, all in flight at once; per-agent figures and the
    verdict of ``rollgym traces check`` on its traces."""
    root.mkdir(parents=True)
    rows = root / "rows.jsonl"
    rows.write_text(
        "".join(
            orjson.dumps({"question": f"{i} + {i % 89}", "agent": agent}).decode() + "\n"
            for i in range(n)
            for agent in ("single_turn", "sdk")
        )
    )
    # the same replicas for both agents, so neither gets more processes than the other
    common = {"kind": "agent", "model": "policy", "environment": "arith", "replicas": replicas}
    config = {
        "run": {
            "input": str(rows),
            "output_dir": str(root / "out"),
            "concurrency": 2 * n,
            "max_attempts": 1,
            "timeout_s": 120,
            "adaptive_window": window,
            "progress_interval_s": 5,
        },
        "servers": {
            "policy": simulated_model(latency),
            "arith": {"kind": "environment", "impl": "arithmetic"},
            "single_turn": {**common, "impl": "single_turn"},
            "sdk": {**common, "impl": "_sdk_agent:SdkSolver", "calls": calls},
        },
        "telemetry": {"preset": "default"},
    }
    path = write_job(root, config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "rollgym", "run", str(path), "--no-table"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = root / "out"
    records = [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines()]
    failures_path = out / "failures.jsonl"
    failures = (
        [orjson.loads(line) for line in failures_path.read_bytes().splitlines()]
        if failures_path.exists()
        else []
    )
    figures = {}
    for agent in ("single_turn", "sdk"):
        mine = [r for r in records if r["dispatch_name"] == agent]
        kinds: dict[str, int] = {}
        examples: dict[str, str] = {}
        for failure in failures:
            if failure.get("dispatch_name") == agent:
                kind = str(failure.get("error_kind", "?"))
                kinds[kind] = kinds.get(kind, 0) + 1
                examples.setdefault(kind, str(failure.get("message", ""))[:300])
        figures[agent] = {
            "rc": proc.returncode,
            "stderr": proc.stderr[-2000:],
            "completed": len(mine),
            "requested": n,
            "failures": kinds,
            "examples": examples,
            "median_s": statistics.median(r["duration_s"] for r in mine) if mine else 0.0,
            "wall_s": (
                max(r["finished_at"] for r in mine) - min(r["started_at"] for r in mine)
                if mine
                else float("nan")
            ),
        }
    return figures, _traces_check(out)


def _print(name: str, r: dict[str, Any]) -> None:
    print(
        f"{name:>12}: completed {r['completed']:,}/{r['requested']:,} "
        f"({r['completed'] / r['requested']:.3f}), median rollout {r['median_s']:.2f} s, "
        f"wall {r['wall_s']:.2f} s" + (f", failures {r['failures']}" if r["failures"] else "")
    )
    for kind, message in r["examples"].items():
        print(f"  first {kind}: {message}")
    if r["rc"] not in (0, 1) or (r["rc"] and not r["failures"]):
        print(f"  rollgym run exited {r['rc']}: {r['stderr']}")


def construction() -> None:
    """What making one rollout's SDK client costs, piece by piece (idle-loop timings)."""
    import asyncio

    import openai

    from rollgym.http.client import HttpClient
    from rollgym.servers.rollout_context import ModelClient, RolloutContext
    from rollgym.servers.sdk_pool import http_library

    http = http_library()

    def per_call(build: Any, n: int) -> float:
        build()
        start = time.perf_counter()
        for _ in range(n):
            build()
        return (time.perf_counter() - start) / n * 1e3

    async def measure() -> None:
        url = "http://127.0.0.1:9/r/x/v1"
        shared = http.AsyncClient(transport=http.AsyncHTTPTransport(), timeout=30)
        fresh = per_call(lambda: openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0), 20)
        transport = per_call(lambda: http.AsyncHTTPTransport(), 20)
        wrap = per_call(lambda: http.AsyncClient(transport=shared._transport, timeout=30), 500)
        sdk = per_call(
            lambda: openai.AsyncOpenAI(
                base_url=url, api_key="k", http_client=shared, max_retries=0
            ),
            500,
        )
        base = openai.AsyncOpenAI(base_url=url, api_key="k", http_client=shared, max_retries=0)
        with_options = per_call(lambda: base.with_options(base_url=url + "2"), 500)
        async with HttpClient() as client:
            model = ModelClient(
                client, "m", "http://127.0.0.1:9", rollout_id="1-0", model_name="m", timeout=30
            )
            rollout = RolloutContext("1-0", model, None)
            ours = per_call(rollout.async_openai, 500)
            await rollout.aclose()
        print(f"AsyncOpenAI(...) with its own transport (the SDK default): {fresh:8.3f} ms")
        print(f"  of which the httpx transport (TLS context, pool):        {transport:8.3f} ms")
        print(f"AsyncClient(transport=<shared>):                            {wrap:8.3f} ms")
        print(f"AsyncOpenAI(http_client=<shared client>):                   {sdk:8.3f} ms")
        print(f"base.with_options(base_url=...):                            {with_options:8.3f} ms")
        print(f"rollout.async_openai() (per-rollout transport, shared pool): {ours:8.3f} ms")
        print(f"ratio SDK default / rollout.async_openai(): {fresh / ours:.0f}x")

    asyncio.run(measure())


def per_call(n: int = 1000, in_flight: int = 200) -> None:
    """CPU per model call, ``rollout.async_openai()`` against ``rollout.chat``, side by side.

    One process: the simulated model (latency 0) under uvicorn on a loopback port and ``n``
    rollouts, ``in_flight`` at a time, each making one call; CPU is the process's (client and
    server together), the two alternating three times. What the agent process of an SDK agent
    spends per call beyond ``single_turn``'s is what a saturated machine must find.
    """
    import asyncio

    import uvicorn

    from rollgym.builtins.models.simulated import SimulatedModel
    from rollgym.event_loop import run
    from rollgym.http.client import HttpClient
    from rollgym.http.server import create_app
    from rollgym.servers.rollout_context import ModelClient, RolloutContext
    from rollgym.servers.sdk_warmup import _warm_in_thread
    from rollgym.servers.server_process import bind_loopback

    messages = [{"role": "user", "content": "Compute: 2 + 3\nReply with 'Answer: <number>'."}]
    options = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0.0}}

    async def measure() -> None:
        _warm_in_thread()
        sock = bind_loopback()
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(SimulatedModel.build("policy", options)),
                log_level="warning",
                access_log=False,
                lifespan="on",
            )
        )
        serving = asyncio.create_task(server._serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with HttpClient() as client:
            gate = asyncio.Semaphore(in_flight)

            async def one(i: int, sdk: bool) -> None:
                async with gate:
                    model = ModelClient(
                        client, "policy", url, rollout_id=f"{i}-0", model_name="sim", timeout=120
                    )
                    rollout = RolloutContext(f"{i}-0", model, None)
                    if sdk:
                        await rollout.async_openai().chat.completions.create(
                            model="sim", messages=messages, max_tokens=64
                        )
                    else:
                        await rollout.chat(messages)
                    await rollout.aclose()

            async def cpu_ms(sdk: bool) -> float:
                started = time.process_time()
                await asyncio.gather(*(one(i, sdk) for i in range(n)))
                return (time.process_time() - started) / n * 1e3

            await cpu_ms(True)  # warm both paths
            await cpu_ms(False)
            figures: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(3):
                for sdk in (True, False):
                    figures[sdk].append(await cpu_ms(sdk))
        server.should_exit = True
        await serving
        sock.close()
        sdk_ms, chat_ms = statistics.median(figures[True]), statistics.median(figures[False])
        print(
            f"CPU per model call ({n:,} calls, {in_flight} in flight, client and loopback "
            f"server in one process, median of 3; load average {os.getloadavg()[0]:.1f}):"
        )
        print(f"  rollout.async_openai(): {sdk_ms:.2f} ms   rollout.chat: {chat_ms:.2f} ms")
        print(
            f"  ratio: {sdk_ms / chat_ms:.2f}; the SDK's extra per call: {sdk_ms - chat_ms:.2f} ms"
        )

    run(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="rollouts, all in flight at once")
    parser.add_argument("--full", action="store_true", help="5,000 in flight")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per generation")
    parser.add_argument("--calls", type=int, default=1, help="model calls of the SDK agent")
    parser.add_argument("--construction", action="store_true", help="client set-up costs only")
    parser.add_argument(
        "--per-call", action="store_true", help="CPU per model call, SDK vs rollout.chat only"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="processes serving each agent (the same for both, so the comparison stays fair)",
    )
    parser.add_argument(
        "--window",
        choices=["on", "off"],
        default="on",
        help="run.adaptive_window (off: every attempt sent at once, as before the window)",
    )
    args = parser.parse_args()
    if args.construction:
        construction()
        return
    if args.per_call:
        per_call()
        return
    n = 5000 if args.full else args.n
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        load_before = os.getloadavg()[0]
        figures, (check_rc, check_line) = _job(
            Path(tmp) / "job", n, args.latency, args.calls, args.window == "on", args.replicas
        )
    single, sdk = figures["single_turn"], figures["sdk"]
    print(
        f"{n:,} rollouts of each agent in flight at once ({2 * n:,} in all), model latency "
        f"{args.latency} s, SDK agent model calls: {args.calls}, run.adaptive_window "
        f"{args.window}, replicas per agent: {args.replicas}; load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    _print("single_turn", single)
    _print("sdk", sdk)
    print(
        f"completed/requested: single_turn {single['completed'] / n:.3f}, "
        f"sdk {sdk['completed'] / n:.3f} (target 1.0)"
    )
    print(
        f"wall-time ratio sdk / single_turn: {sdk['wall_s'] / single['wall_s']:.2f} "
        f"(target <= 1.5); median-rollout ratio: {sdk['median_s'] / single['median_s']:.2f}"
    )
    print(f"rollgym traces check: exit {check_rc} (target 0): {check_line}")


if __name__ == "__main__":
    main()
