"""A trainer of the tests' own: its own global tracer provider, rollgym inside its span.

Run as a script, in a fresh process (a global tracer provider can be set once per process)::

    python trainer.py collector OUT   # rollgym.Collector, first with no provider, then with one
    python trainer.py run_job OUT     # rollgym.run_job inside the trainer's span

It writes what it saw to ``OUT/trainer.json``: its own spans (an in-memory exporter on its
provider) and the outcomes' trace ids. It does nothing for rollgym's telemetry beyond
``trace.set_tracer_provider``: that is what the tests prove is enough.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# Run as a script: its folder is on sys.path, the shared test helpers' folder (tests/) is not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from telemetry_helpers import from_sdk, launched_servers, quick_rows, quick_servers, trace_store  # noqa: E402

import rollgym
from rollgym.telemetry.groups import gate

AGENTS = ("solver", "walker")
ROUTES = {"keychain_episodes": "keys"}


def _install_trainer_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """What a trainer (NeMo RL, say) does for its own tracing, and nothing more."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider, exporter


def _spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    out = []
    for span, record in zip(
        exporter.get_finished_spans(), from_sdk(exporter.get_finished_spans()), strict=True
    ):
        scope = span.instrumentation_scope
        out.append(
            {
                **dataclasses.asdict(record),
                "scope": [scope.name, scope.version] if scope is not None else None,
            }
        )
    return out


def _collector(urls: dict[str, str]) -> rollgym.Collector:
    return rollgym.Collector(
        {name: urls[name] for name in (*AGENTS, "keys")},
        agent="solver",
        environment_routes=ROUTES,
        agents=AGENTS,
        concurrency=4,
        timeout_s=60,
    )


async def _stream(collector: rollgym.Collector, rows: list[dict[str, Any]]) -> list[Any]:
    return [o async for o in collector.stream(rows)]


async def collector_mode(out: Path) -> dict[str, Any]:
    rows = quick_rows(2, 1, 1)
    seen: dict[str, Any] = {"provider_before": type(trace.get_tracer_provider()).__name__}
    async with (
        trace_store(out) as store,
        launched_servers(quick_servers(0.0), out, traces_to=store.endpoint) as urls,
    ):
        # 1. no provider of the trainer's: the API default records nothing, rollgym pays nothing
        async with _collector(urls) as collector:
            seen["gate_without_provider"] = gate.tracing
            plain = await _stream(collector, rows)
        # 2. the trainer sets its provider and opens its step span; rollgym traces into it
        provider, exporter = _install_trainer_provider()
        tracer = provider.get_tracer("trainer")
        with tracer.start_as_current_span("trainer.step") as step:
            async with _collector(urls) as collector:
                seen["gate_with_provider"] = gate.tracing
                traced = await _stream(collector, rows)
        seen["gate_after"] = gate.tracing
        with tracer.start_as_current_span("trainer.after"):
            pass  # the provider still works: rollgym never shut it down
    context = step.get_span_context()
    return {
        **seen,
        "plain_trace_ids": [o.trace_id for o in plain],
        "traced": [[o.rollout_id, o.trace_id, type(o).__name__] for o in traced],
        "step": [format(context.trace_id, "032x"), format(context.span_id, "016x")],
        "spans": _spans(exporter),
    }


async def run_job_mode(out: Path) -> dict[str, Any]:
    rows = out / "rows.jsonl"
    rows.write_bytes(b"\n".join(orjson.dumps(r) for r in quick_rows(2, 1, 1)) + b"\n")
    config_path = out / "job.yaml"
    config = {
        "run": {
            "input": str(rows),
            "output_dir": str(out / "run"),
            "agent": "solver",
            "environment_routes": ROUTES,
            "retry_backoff_s": 0.01,
        },
        "servers": quick_servers(0.0),
        "telemetry": {"preset": "default"},
    }
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    provider, exporter = _install_trainer_provider()
    tracer = provider.get_tracer("trainer")
    with tracer.start_as_current_span("trainer.step") as step:
        summary = await rollgym.run_job(rollgym.load_config(config_path))
    with tracer.start_as_current_span("trainer.after"):
        pass
    context = step.get_span_context()
    return {
        "completed": summary.completed,
        "gate_after": gate.tracing,
        "step": [format(context.trace_id, "032x"), format(context.span_id, "016x")],
        "spans": _spans(exporter),
    }


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    body = collector_mode if mode == "collector" else run_job_mode
    result = asyncio.run(body(out))
    (out / "trainer.json").write_bytes(orjson.dumps(result))


if __name__ == "__main__":
    main()
