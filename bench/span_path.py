"""The driver's traced span path per rollout, this checkout against another, side by side.

What one traced attempt adds on the driver's event loop, without the network: the
``gym.rollout.dispatch`` span opened under an owned ``gym.job`` span (a new root with a link),
the HTTP client span under it, ``traceparent`` written, the client's wait for a connection,
the status and the outcome recorded, both spans ended into rollgym's span pipeline (its
recording tracer with the default time-ordered ids; the sink is a bounded ``deque``, standing
in for the shipper's queue). Each side runs in its own interpreter with
its own ``PYTHONPATH``, alternating A, B, A, B, ... so the drift of a shared machine affects
both; each run reports the fastest of its repeats. Prints µs per rollout and the ratio.

    python bench/span_path.py --against /work/main/src [--runs 6] [-n 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = HERE.parent / "src"

_CHILD = r"""
import inspect, sys, time
from collections import deque
from rollgym.http import client as http_client
from rollgym.telemetry import spans
from rollgym.telemetry._state import state
from rollgym.telemetry.context import inject_span
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.sampling import TimeOrderedIdGenerator

n, repeats = int(sys.argv[1]), int(sys.argv[2])
sink = deque(maxlen=4096)
# the id generator setup_telemetry installs (time-ordered trace ids)
provider = RecordingTracerProvider(sink.append, id_generator=TimeOrderedIdGenerator())
state.tracer = provider.get_tracer("rollgym", "bench")
rows = [{"q": i, "task_index": i, "rollout_index": 0, "attempt": 0} for i in range(n)]
url = "http://127.0.0.1:8000/run"
#: The client's wait for a connection, recorded on the client span (handed the span where
#: the client does that, else looking up the current span as it did before).
note_queue_wait = http_client._note_queue_wait
hands_span = "span" in inspect.signature(note_queue_wait).parameters


def attempt(row):
    with spans.dispatch_span(row, "agent", "agent") as span:
        with spans.http_client_span("POST", "agent", url, "/run") as client:
            headers = {"Content-Type": "application/json"}
            inject_span(headers, client.get_span_context())
            if hands_span:
                note_queue_wait(0.0001, client)
            else:
                note_queue_wait(0.0001)
            client.set_attribute("http.response.status_code", 200)
        spans.record_dispatch_outcome(span, "ok", 1.0)
        context = span.get_span_context()
        if context.is_valid:
            context.trace_flags.sampled


best = float("inf")
with spans.job_span("bench"):
    for _ in range(repeats):
        start = time.perf_counter()
        for row in rows:
            attempt(row)
        best = min(best, (time.perf_counter() - start) / n)
assert len(sink) > 0
print(best * 1e6)
"""


def run_once(src: Path, n: int, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n), str(repeats)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", type=Path, required=True, help="the other side's src/")
    parser.add_argument("--runs", type=int, default=6, help="interpreters per side")
    parser.add_argument("-n", type=int, default=20_000, help="rollouts per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per interpreter")
    args = parser.parse_args()
    ours, theirs = [], []
    for _ in range(args.runs):
        theirs.append(run_once(args.against, args.n, args.repeats))
        ours.append(run_once(OURS, args.n, args.repeats))
    load = os.getloadavg()[0]
    a, b = statistics.median(theirs), statistics.median(ours)
    pairs = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    print(f"traced span path per rollout (dispatch + client span), load {load:.1f}")
    print(f"{args.against}: {' '.join(f'{x:.2f}' for x in theirs)} us (median {a:.2f})")
    print(f"{OURS}: {' '.join(f'{x:.2f}' for x in ours)} us (median {b:.2f})")
    print(f"ratio this/other: {b / a:.2f} of medians, {pairs:.2f} median of adjacent pairs")


if __name__ == "__main__":
    main()
