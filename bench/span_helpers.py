"""Where a traced rollout's span CPU goes in the driver, with no network and no event loop.

Each piece below is what the driver does for one traced rollout's two spans (``gym.dispatch``
and its HTTP client span), timed in a loop in this one process, rounds alternating, best of
the rounds (CPU time, microseconds a rollout):

- ``recording``: the recording tracer alone: two ``start_span``, the dispatch span made
  current and undone, two ``end``; records kept in a list;
- ``helpers``: the same two spans through the driver's own helpers
  (``spans.dispatch_span``, ``spans.http_client_span``, ``context.inject_span``,
  ``record_dispatch_outcome``, the trace id formatted once), as ``driver/dispatch.py`` and
  ``http/client.py`` call them;
- ``helpers + marshal``: that, each record packed with ``marshal.dumps`` as the shipper packs
  it when its span ends.

The difference between two lines is what one layer costs: the glue around recording, then
packing. What the bench leaves out (the traced HTTP client's request, the shipper's writer
thread, garbage collections) is in ``bench/shipper_hot_path.py``, which runs the real driver.

    python bench/span_helpers.py [--rollouts 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import marshal
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import SpanKind

from rollgym.telemetry import runtime_context, spans
from rollgym.telemetry._state import state
from rollgym.telemetry.context import inject_span
from rollgym.telemetry.groups import ALL_GROUPS, configure_gate
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.sampling import TimeOrderedIdGenerator

#: A collector row as the driver makes it (identity fields beside the task's own).
ROW = {"q": 1, "task_index": 3, "rollout_index": 0, "attempt": 0}
URL = "http://127.0.0.1:8000/run"


def recording_only() -> None:
    tracer = state.tracer
    span = tracer.start_span("gym.dispatch", attributes={"rollgym.dispatch.name": "agent"})
    token = runtime_context.attach(runtime_context.with_span(span, runtime_context.get_current()))
    child = tracer.start_span("POST /run", kind=SpanKind.CLIENT, attributes={"url.full": URL})
    child.end()
    runtime_context.detach(token)
    span.end()


def through_helpers() -> None:
    with spans.dispatch_span(ROW, "agent", "agent") as span:
        headers = {"content-type": "application/json"}
        with spans.http_client_span("POST", "agent", URL, "/run") as client:
            inject_span(headers, client.get_span_context())
            client.set_attribute("http.response.status_code", 200)
        spans.record_dispatch_outcome(span, "ok", 1.0)
        format(span.get_span_context().trace_id, "032x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    kept: list[Any] = []
    tracers = {
        packed: RecordingTracerProvider(
            (lambda record: kept.append(marshal.dumps(record))) if packed else kept.append,
            id_generator=TimeOrderedIdGenerator(),
        ).get_tracer("rollgym")
        for packed in (False, True)
    }
    configure_gate(tuple(ALL_GROUPS), tracing_active=True)
    pieces: dict[str, tuple[Callable[[], None], bool]] = {
        "recording": (recording_only, False),
        "helpers": (through_helpers, False),
        "helpers + marshal": (through_helpers, True),
    }
    best = dict.fromkeys(pieces, float("inf"))
    for round_ in range(args.rounds + 1):  # the first round warms every path, uncounted
        for name, (piece, packed) in pieces.items():
            state.tracer = tracers[packed]
            kept.clear()
            started = time.process_time()
            for _ in range(args.rollouts):
                piece()
            if round_:
                spent = (time.process_time() - started) / args.rollouts * 1e6
                best[name] = min(best[name], spent)
    configure_gate((), tracing_active=False)
    print(
        f"{args.rollouts} rollouts a round, best of {args.rounds} rounds, CPU a rollout (2 spans)"
    )
    for name, us in best.items():
        print(f"{name:>18}: {us:6.2f} us  ({us / 2:.2f} us a span)")
    print(f"helpers around recording: {best['helpers'] - best['recording']:.2f} us a rollout")
    print(f"marshal of two records:   {best['helpers + marshal'] - best['helpers']:.2f} us")


if __name__ == "__main__":
    main()
