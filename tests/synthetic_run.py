"""A realistic synthetic run, emitted through the real OpenTelemetry SDK.

Why it exists: tests, the browser test's screenshots and the benchmarks need a store that looks
like a real run (startup trace, job trace, one linked trace per attempt with HTTP, rollout,
model, tool and verify spans from four processes) without launching servers. Span names and
keys come from ``rollgym.telemetry.names``; timestamps are explicit, so nothing sleeps.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from rollgym.telemetry import names
from rollgym.tracestore.store_process import start_trace_store

MS = 1_000_000


@dataclass
class SyntheticRun:
    """What the run "wrote": rows for rollouts.jsonl / failures.jsonl, and the job span."""

    run_id: str
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    job_trace_id: str | None = None


class _Processes:
    """One TracerProvider per process of a run, as in a real run (resource per server)."""

    def __init__(self, run_id: str, exporter: Callable[[], SpanExporter]) -> None:
        self.providers: dict[str, TracerProvider] = {}
        for server, kind in (
            ("driver", "driver"),
            ("agent", "agent"),
            ("env", "environment"),
            ("model", "model"),
        ):
            resource = Resource.create(
                {
                    SERVICE_NAME: f"rollgym-{server}",
                    names.RUN_ID: run_id,
                    names.SERVER_NAME: server,
                    names.SERVER_KIND: kind,
                }
            )
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(
                BatchSpanProcessor(exporter(), max_queue_size=65536, max_export_batch_size=512)
            )
            self.providers[server] = provider

    def tracer(self, server: str) -> trace.Tracer:
        return self.providers[server].get_tracer("rollgym")

    def shutdown(self) -> None:
        for provider in self.providers.values():
            provider.force_flush()
            provider.shutdown()


@contextmanager
def planting_spans(run_dir: Path, name: str = "planted") -> Iterator[trace.Tracer]:
    """A real trace store on ``run_dir/traces.db`` and a tracer whose every span goes to it
    over OTLP as the span ends, for a test that plants spans by hand; at the end the spans
    are flushed and the store stopped (it must exit cleanly)."""
    store = start_trace_store(run_dir / "traces.db", run_dir / "store.log")
    try:
        provider = TracerProvider()
        exporter = OTLPSpanExporter(endpoint=store.traces_endpoint)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        yield provider.get_tracer(name)
        provider.shutdown()
    except BaseException:
        store.stop()
        raise
    assert store.stop() == 0, "the trace store did not exit cleanly"


def emit_run(
    exporter: Callable[[], SpanExporter],
    *,
    run_id: str = "synthetic-run",
    rollouts: int = 20,
    turns: int = 2,
    with_job: bool = True,
    seed: int = 0,
) -> SyntheticRun:
    """Emit a whole run; every 5th rollout needs a retry, every 7th fails for good."""
    rng = random.Random(seed)
    procs = _Processes(run_id, exporter)
    result = SyntheticRun(run_id)
    t0 = time.time_ns()
    job_link: list[Link] = []
    if with_job:
        _startup(procs, t0)
        job = procs.tracer("driver").start_span(names.SPAN_JOB, context=Context(), start_time=t0)
        job.set_attribute(names.RUN_ID, run_id)
        job_link = [Link(job.get_span_context())]
        result.job_trace_id = format(job.get_span_context().trace_id, "032x")
    clock = t0 + 5 * MS
    for index in range(rollouts):
        base = f"{index}-0"
        attempts = 2 if index % 5 == 4 else 1
        for attempt in range(attempts):
            rollout_id = base if attempt == 0 else f"{base}-a{attempt}"
            failed = index % 7 == 6 or attempt < attempts - 1
            outcome = names.OUTCOME_ERROR if failed else names.OUTCOME_OK
            reward = None if failed else round(rng.random(), 3)
            start = clock + rng.randint(0, 3) * MS
            trace_id, end = _rollout(
                procs, rng, rollout_id, attempt, outcome, reward, start, turns, job_link
            )
            clock = start + rng.randint(2, 6) * MS
            if attempt == attempts - 1:
                row = {"rollout_id": base, "attempt": attempt, "trace_id": trace_id}
                if failed:
                    result.failures.append({**row, "error_kind": "server_error", "message": "500"})
                else:
                    result.rollouts.append(
                        {**row, "reward": reward, "duration_s": (end - start) / 1e9}
                    )
    if with_job:
        tracer = procs.tracer("driver")
        parent = trace.set_span_in_context(job)
        for name in (names.SPAN_AGGREGATE_METRICS, names.SPAN_FINALIZE):
            span = tracer.start_span(name, context=parent, start_time=clock)
            clock += 2 * MS
            span.end(end_time=clock)
        job.end(end_time=clock + MS)
    procs.shutdown()
    return result


def _startup(procs: _Processes, t0: int) -> None:
    tracer = procs.tracer("driver")
    root = tracer.start_span(names.SPAN_STARTUP, context=Context(), start_time=t0 - 900 * MS)
    parent = trace.set_span_in_context(root)
    for offset, (server, kind) in enumerate((("agent", "agent"), ("env", "environment"))):
        span = tracer.start_span(
            names.SPAN_SERVER_STARTUP,
            context=parent,
            start_time=t0 - (800 - offset * 50) * MS,
            attributes={names.SERVER_NAME: server, names.SERVER_KIND: kind},
        )
        span.end(end_time=t0 - (200 + offset * 30) * MS)
    root.end(end_time=t0 - 100 * MS)


def _rollout(
    procs: _Processes,
    rng: random.Random,
    rollout_id: str,
    attempt: int,
    outcome: str,
    reward: float | None,
    start: int,
    turns: int,
    links: list[Link],
) -> tuple[str, int]:
    """One attempt's trace: dispatch -> client -> server -> rollout -> model/tool/verify."""
    driver, agent = procs.tracer("driver"), procs.tracer("agent")
    dispatch = driver.start_span(
        names.SPAN_DISPATCH,
        context=Context(),
        links=links,
        start_time=start,
        attributes={
            names.ROLLOUT_ID: rollout_id,
            names.ROLLOUT_ATTEMPT: attempt,
            names.DISPATCH_NAME: "simple_agent",
            names.DESTINATION_SERVER_NAME: "agent",
        },
    )
    ctx = trace.set_span_in_context(dispatch)
    client = driver.start_span(
        "POST",
        context=ctx,
        kind=SpanKind.CLIENT,
        start_time=start + MS // 10,
        attributes={
            names.HTTP_REQUEST_METHOD: "POST",
            names.URL_FULL: "http://127.0.0.1:9001/run",
            names.DESTINATION_SERVER_NAME: "agent",
            names.HTTP_CLIENT_QUEUE_DURATION: rng.randint(0, 50) / 1e6,
        },
    )
    server = agent.start_span(
        "POST /run",
        context=trace.set_span_in_context(client),
        kind=SpanKind.SERVER,
        start_time=start + MS // 5,
        attributes={names.HTTP_REQUEST_METHOD: "POST", names.HTTP_ROUTE: "/run"},
    )
    rollout = agent.start_span(
        names.SPAN_ROLLOUT,
        context=trace.set_span_in_context(server),
        start_time=start + MS // 4,
        attributes={names.ROLLOUT_ID: rollout_id},
    )
    now = start + MS // 2
    inner = trace.set_span_in_context(rollout)
    for turn in range(turns):
        now = _model_turn(procs, rng, inner, rollout_id, turn, now)
        now = _child(
            procs.tracer("env"),
            names.SPAN_ENV_TOOL,
            inner,
            now,
            rng.randint(1, 4),
            {names.ROLLOUT_ID: rollout_id, names.ENV_TOOL_NAME: "search"},
        )
    now = _child(
        procs.tracer("env"), names.SPAN_VERIFY, inner, now, 1, {names.ROLLOUT_ID: rollout_id}
    )
    end = now + MS // 2
    status = 200 if outcome == names.OUTCOME_OK else 500
    rollout.end(end_time=end)
    for span, stop in ((server, end + MS // 10), (client, end + MS // 5)):
        span.set_attribute(names.HTTP_RESPONSE_STATUS_CODE, status)
        if status != 200:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=stop)
    dispatch.set_attribute(names.ROLLOUT_OUTCOME, outcome)
    if reward is not None:
        dispatch.set_attribute(names.ROLLOUT_REWARD, reward)
    else:
        dispatch.set_status(Status(StatusCode.ERROR, "agent answered 500"))
    dispatch.end(end_time=end + MS // 4)
    return format(dispatch.get_span_context().trace_id, "032x"), end + MS // 4


def _model_turn(
    procs: _Processes, rng: random.Random, parent: Context, rollout_id: str, turn: int, now: int
) -> int:
    chat = procs.tracer("agent").start_span(
        names.SPAN_MODEL_CHAT,
        context=parent,
        kind=SpanKind.CLIENT,
        start_time=now,
        attributes={
            names.ROLLOUT_ID: rollout_id,
            names.GEN_AI_OPERATION_NAME: "chat",
            names.GEN_AI_PROVIDER_NAME: "rollgym",
            names.GEN_AI_REQUEST_MODEL: "sim-policy",
        },
    )
    length = rng.randint(3, 30) * MS
    engine = procs.tracer("model").start_span(
        names.SPAN_ENGINE_REQUEST,
        context=trace.set_span_in_context(chat),
        kind=SpanKind.SERVER,
        start_time=now + MS // 5,
        attributes={
            names.ROLLOUT_ID: rollout_id,
            names.GEN_AI_REQUEST_ID: f"{rollout_id}.{turn}",
            names.GEN_AI_REQUEST_MODEL: "sim-policy",
        },
    )
    engine.add_event("first_token", timestamp=now + length // 3)
    queued = rng.randint(0, length // 10)
    engine.set_attributes(
        {
            names.GEN_AI_LATENCY_TIME_IN_QUEUE: queued / 1e9,
            names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: (length // 3 - queued) / 1e9,
            names.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: (length - length // 3) / 1e9,
        }
    )
    engine.end(end_time=now + length)
    chat.set_attributes(
        {
            names.GEN_AI_RESPONSE_ID: f"chatcmpl-{rollout_id}.{turn}",
            names.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
            names.GEN_AI_USAGE_INPUT_TOKENS: rng.randint(100, 900),
            names.GEN_AI_USAGE_OUTPUT_TOKENS: rng.randint(10, 200),
        }
    )
    chat.end(end_time=now + length + MS // 5)
    return now + length + MS // 2


def _child(
    tracer: trace.Tracer, name: str, parent: Context, now: int, ms: int, attrs: dict[str, Any]
) -> int:
    span = tracer.start_span(name, context=parent, start_time=now, attributes=attrs)
    span.end(end_time=now + ms * MS)
    return now + ms * MS + MS // 5


def write_outputs(run_dir: Path, run: SyntheticRun) -> None:
    """What the driver writes next to traces.db (the fields check reads)."""
    with (run_dir / "rollouts.jsonl").open("w") as out:
        for row in run.rollouts:
            out.write(json.dumps(row) + "\n")
    with (run_dir / "failures.jsonl").open("w") as out:
        for row in run.failures:
            out.write(json.dumps(row) + "\n")
    (run_dir / "summary.json").write_text(
        json.dumps(
            {
                "run_id": run.run_id,
                "requested": len(run.rollouts) + len(run.failures),
                "completed": len(run.rollouts),
                "failed": len(run.failures),
            }
        )
    )
