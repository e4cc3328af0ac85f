"""The span shippers' encoding: CPU per span of ``encode_request``, two sources or two builds.

Encodes the same batches of rollout-like span records (a dispatch's attributes: ids, names,
statuses, a few unique values per span, a link, an event; 512 spans a request) in child
processes, alternating between this checkout's ``src`` and ``--against-src`` (for example
main's), and prints the median CPU per span of each and their ratio: the before and after of
a change to the encoder, measured side by side in one run. Each side encodes with the encoder
its exporter child would use (``pipeline.native``: the compiled copy when built and current).
``--compiled`` compares this checkout with itself under ``ROLLGYM_PURE_PYTHON=1`` instead: what
compiling the encoder buys.

    python bench/span_encoding.py --against-src <main checkout>/src [--rounds 5]
    python bench/span_encoding.py --compiled
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

CHILD = r"""
import sys, time
try:
    from rollgym.telemetry.pipeline.native import COMPILED, encode_request
except ImportError:  # a checkout from before the compiled encoder
    from rollgym.telemetry.pipeline.wire import encode_request
    COMPILED = False

def record(i):
    attrs = {
        "gym.rollout.id": f"{i % 997}-{i % 8}", "gym.task.index": i % 997,
        "gym.rollout.index": i % 8, "gym.attempt": 0, "gym.dispatch.name": "solver",
        "server.address": "127.0.0.1", "server.port": 40123, "http.request.method": "POST",
        "url.path": "/run", "http.response.status_code": 200, "gym.reward": (i % 5) / 4,
        "gym.duration_s": 0.0213 + i * 1e-7, "destination.server.name": "solver",
    }
    events = [("gym.retry", 1_700_000_000_000_000_000 + i, {"gym.attempt": 1})] if i % 9 == 0 else None
    links = [(i * 7919 + 1, i + 3, True, {"gym.link": "job"})] if i % 4 == 0 else None
    return (i * 1_000_003 + 1, i + 1, i // 4 + 1 if i % 4 else 0, False, "gym.dispatch POST /run",
            2, 1_700_000_000_000_000_000 + i, 1_700_000_000_020_000_000 + i, attrs, events,
            links, 0, None, ("rollgym", "0.1", None), None)

resource = {"service.name": "rollgym-driver", "gym.run.id": "r-1", "process.pid": 4242}
batches = [[record(b * 512 + i) for i in range(512)] for b in range(int(sys.argv[1]))]
for batch in batches[:4]:
    encode_request(resource, batch)
start = time.process_time()
for batch in batches:
    encode_request(resource, batch)
print((time.process_time() - start) / (len(batches) * 512), COMPILED)
"""


def _per_span(src: str, batches: int, pure: bool = False) -> tuple[float, bool]:
    env = {**os.environ, "PYTHONPATH": src}
    env.pop("ROLLGYM_PURE_PYTHON", None)
    if pure:
        env["ROLLGYM_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(batches)], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"encoding with {src} failed: {done.stderr.strip()[-500:]}")
    per_span, compiled = done.stdout.split()
    return float(per_span), compiled == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--against-src", help="the other checkout's src folder")
    sides.add_argument(
        "--compiled", action="store_true", help="this checkout, compiled vs ROLLGYM_PURE_PYTHON=1"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=100, help="512-span requests a round")
    args = parser.parse_args()
    ways = {"this": str(SRC), "against": args.against_src or str(SRC)}
    per: dict[str, list[float]] = {way: [] for way in ways}
    compiled: dict[str, bool] = {}
    load = os.getloadavg()[0]
    for i in range(args.rounds):
        for way in list(ways) if i % 2 == 0 else list(reversed(ways)):
            per_span, compiled[way] = _per_span(
                ways[way], args.batches, pure=args.compiled and way == "against"
            )
            per[way].append(per_span)
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    for way, src in ways.items():
        rounds = ", ".join(f"{p * 1e6:.2f}" for p in per[way])
        build = "compiled" if compiled[way] else "pure Python"
        print(
            f"{way:8s} {statistics.median(per[way]) * 1e6:6.2f} us a span ({rounds}) "
            f"[{src}, {build}]"
        )
    ratio = statistics.median(per["against"]) / statistics.median(per["this"])
    print(f"CPU per span against / this: {ratio:.2f}")


if __name__ == "__main__":
    main()
