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
- ``helpers + packed``: that, the records packed as the shipper packs them: kept until a
  batch (512) is full, then marshalled as one (``frames.pack_batch``, done by the shipper's
  writer thread in a run);
- ``helpers + each packed``: instead each record marshalled on its own as its span ends, as
  the shipper did before batches were packed whole.

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

from rollgym.defaults import SPAN_EXPORT_BATCH_SIZE
from rollgym.telemetry import runtime_context, spans
from rollgym.telemetry._state import state
from rollgym.telemetry.context import inject_span
from rollgym.telemetry.groups import ALL_GROUPS, configure_gate
from rollgym.telemetry.pipeline.frames import pack_batch
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

    def held(pack: Callable[[list[Any]], object] | None, record: Any) -> None:
        """Keep ``record`` as a queue would until a batch is full, then ``pack`` the batch."""
        kept.append(record)
        if len(kept) == SPAN_EXPORT_BATCH_SIZE:
            if pack is not None:
                pack(kept)
            kept.clear()

    sinks: dict[str, Callable[[Any], None]] = {
        "kept": lambda record: held(None, record),
        "by batch": lambda record: held(pack_batch, record),
        "each": lambda record: held(None, marshal.dumps(record)),
    }
    tracers = {
        way: RecordingTracerProvider(sink, id_generator=TimeOrderedIdGenerator()).get_tracer(
            "rollgym"
        )
        for way, sink in sinks.items()
    }
    configure_gate(tuple(ALL_GROUPS), tracing_active=True)
    pieces: dict[str, tuple[Callable[[], None], str]] = {
        "recording": (recording_only, "kept"),
        "helpers": (through_helpers, "kept"),
        "helpers + packed": (through_helpers, "by batch"),
        "helpers + each packed": (through_helpers, "each"),
    }
    best = dict.fromkeys(pieces, float("inf"))
    for round_ in range(args.rounds + 1):  # the first round warms every path, uncounted
        for name, (piece, way) in pieces.items():
            state.tracer = tracers[way]
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
        print(f"{name:>22}: {us:6.2f} us  ({us / 2:.2f} us a span)")
    print(f"helpers around recording: {best['helpers'] - best['recording']:.2f} us a rollout")
    print(
        f"packing two records: {best['helpers + packed'] - best['helpers']:.2f} us by batch, "
        f"{best['helpers + each packed'] - best['helpers']:.2f} us each on its own"
    )


if __name__ == "__main__":
    main()
