"""Query benchmark: ``show`` of one rollout and ``ls`` of one page on a 1,000,000-span store.

Builds the store quickly by bulk insert through ``TraceStore.write_batch`` (rows shaped exactly
like the decoder's: one dispatch root + 13 children per rollout, each child carrying the
rollout id), then times the same query functions the CLI and viewer call, on a fresh read-only
connection. Target: each under 100 ms.

    python bench/queries.py [--spans 1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from rollgym.reading import queries
from rollgym.telemetry import names
from rollgym.tracestore.decode import SpanBatch, json_text
from rollgym.tracestore.store import TraceStore, connect_readonly

TARGET_MS = 100.0
SPANS_PER_ROLLOUT = 14
CHILD_NAMES = (
    "POST",
    "POST /run",
    names.SPAN_ROLLOUT,
    names.SPAN_MODEL_CHAT,
    "llm_request",
    names.SPAN_ENV_TOOL,
)


def build(db: Path, total: int) -> int:
    """Insert ``total`` spans; returns the number of rollouts."""
    store = TraceStore(db)
    resource = Resource(
        attributes=[KeyValue(key=names.RUN_ID, value=AnyValue(string_value="bench"))]
    )
    res_id, run_id, res_row = store.resources(resource)
    rollouts = total // SPANS_PER_ROLLOUT
    now = time.time_ns()
    batch = SpanBatch(resources=[res_row])
    for index in range(rollouts):
        rollout_id = f"{index}-0"
        trace_id, root = os.urandom(16), os.urandom(8)
        start = now + index * 1_000_000
        duration = 5_000_000 + (index * 7919) % 50_000_000
        attrs = json_text(
            {
                names.ROLLOUT_ID: rollout_id,
                names.ROLLOUT_ATTEMPT: 0,
                names.DISPATCH_NAME: "agent",
                names.ROLLOUT_OUTCOME: "ok",
                names.ROLLOUT_REWARD: (index % 10) / 10,
            }
        )
        batch.spans.append(
            (
                trace_id,
                root,
                None,
                names.SPAN_DISPATCH,
                1,
                start,
                start + duration,
                0,
                None,
                res_id,
                "rollgym",
                rollout_id,
                run_id,
                attrs,
                None,
                0,
            )
        )
        batch.dispatches.append(
            (
                trace_id,
                root,
                1,
                rollout_id,
                0,
                "agent",
                "ok",
                (index % 10) / 10,
                start,
                duration,
                run_id,
                0,
            )
        )
        parent = root
        child_attrs = json_text({names.ROLLOUT_ID: rollout_id, names.GEN_AI_REQUEST_MODEL: "m"})
        for child in range(SPANS_PER_ROLLOUT - 1):
            span_id = os.urandom(8)
            batch.spans.append(
                (
                    trace_id,
                    span_id,
                    parent,
                    CHILD_NAMES[child % len(CHILD_NAMES)],
                    1,
                    start + child,
                    start + duration - child,
                    0,
                    None,
                    res_id,
                    "rollgym",
                    rollout_id,
                    run_id,
                    child_attrs,
                    None,
                    0,
                )
            )
            parent = span_id if child < 3 else parent
        if len(batch.spans) >= 50_000:
            store.write_batch(batch)
            batch = SpanBatch(resources=[res_row])
    store.write_batch(batch)
    store.close()
    return rollouts


def timed(fn, repeat: int = 20) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "traces.db"
        start = time.perf_counter()
        rollouts = build(db, args.spans)
        print(
            f"built {rollouts * SPANS_PER_ROLLOUT:,} spans ({rollouts:,} rollouts) "
            f"in {time.perf_counter() - start:.1f} s"
        )
        conn = connect_readonly(db)
        target = f"{rollouts // 2}-0"
        detail = queries.rollout_detail(conn, target)
        assert len(detail["attempts"][0]["spans"]) == SPANS_PER_ROLLOUT, "show found the trace"
        show_ms = timed(lambda: queries.rollout_detail(conn, target))
        ls_ms = timed(lambda: queries.list_rollouts(conn, limit=50, offset=rollouts // 2))
        ls_dur_ms = timed(
            lambda: queries.list_rollouts(conn, limit=50, sort="duration", descending=True)
        )
        ls_filter_ms = timed(
            lambda: queries.list_rollouts(conn, limit=50, min_reward=0.5, outcome="ok")
        )
        conn.close()
    for label, value in (
        ("show one rollout", show_ms),
        ("ls one page (offset middle)", ls_ms),
        ("ls sorted by duration", ls_dur_ms),
        ("ls filtered (outcome, min reward)", ls_filter_ms),
    ):
        verdict = "ok" if value < TARGET_MS else "OVER"
        print(f"{label}: {value:.2f} ms median (target < {TARGET_MS:.0f} ms: {verdict})")


if __name__ == "__main__":
    main()
