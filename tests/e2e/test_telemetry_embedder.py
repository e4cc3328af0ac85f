"""A trainer with nothing but its own tracer provider gets its rollouts traced into it.

The NeMo RL case of the design discussion: the trainer sets its own global SDK tracer
provider, opens its step span, and uses ``rollgym.Collector`` or ``rollgym.run_job``. It never
calls rollgym's telemetry setup. Each case runs ``trainer.py`` in a fresh process (a global
provider can be set once per process) against real servers exporting to a real trace store,
then joins the trainer's spans with the store's and walks them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import HERE, pythonpath
from telemetry_helpers import SpanRecord, Spans, read_store

import rollgym
from rollgym.telemetry import names

pytestmark = pytest.mark.e2e

SERVER_SERVICES = {"solver", "walker", "keys", "arith", "policy"}


def _run_trainer(mode: str, out: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("_ROLLGYM_TELEMETRY", None)
    env["PYTHONPATH"] = pythonpath()
    proc = subprocess.run(
        [sys.executable, str(HERE / "trainer.py"), mode, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = orjson.loads((out / "trainer.json").read_bytes())
    return result


def _records(raw: list[dict[str, Any]]) -> list[SpanRecord]:
    return [
        SpanRecord(
            **{k: v for k, v in span.items() if k not in ("scope", "links")},
            links=tuple(tuple(link) for link in span["links"]),
        )
        for span in raw
    ]


def test_a_collector_traces_into_the_trainers_own_provider(tmp_path: Path) -> None:
    out = tmp_path / "collector"
    seen = _run_trainer("collector", out)
    step_trace, step_id = seen["step"]

    # no provider of the trainer's: the API default records nothing and gets nothing
    assert seen["provider_before"] == "ProxyTracerProvider"
    assert seen["gate_without_provider"] is False
    assert seen["plain_trace_ids"] == [None] * 4

    # with its provider: one dispatch per attempt nested under the step, trace ids on outcomes
    assert seen["gate_with_provider"] is True and seen["gate_after"] is False
    assert [kind for _, _, kind in seen["traced"]] == ["RolloutResult"] * 4
    assert {trace_id for _, trace_id, _ in seen["traced"]} == {step_trace}
    trainer_spans = _records(seen["spans"])
    dispatches = [s for s in trainer_spans if s.name == names.SPAN_DISPATCH]
    assert sorted(d.rollout_id or "" for d in dispatches) == sorted(r for r, _, _ in seen["traced"])
    for dispatch in dispatches:
        assert (dispatch.trace_id, dispatch.parent_id, dispatch.links) == (step_trace, step_id, ())
    scopes = {tuple(s["scope"]) for s in seen["spans"] if s["name"] == names.SPAN_DISPATCH}
    assert scopes == {("rollgym", rollgym.__version__)}
    assert "trainer.after" in {s.name for s in trainer_spans}, "the trainer's provider was shut"

    # traceparent went out on /run: each agent's server span is a child of the trainer's spans
    stored = read_store(out / "traces.db")
    index = Spans(trainer_spans + stored)
    runs = [s for s in stored if s.name == "POST /run" and s.kind == "SERVER"]
    joined = [s for s in runs if s.trace_id == step_trace]
    assert len(joined) == 4
    for server_span in joined:
        client = index.parent(server_span)
        assert client is not None and client.service == "trainer"
        assert index.owning_dispatch(server_span) in dispatches
    # the first pass sent no traceparent: its server spans are roots of their own traces
    unjoined = [s for s in runs if s.trace_id != step_trace]
    assert len(unjoined) == 4 and all(s.parent_id is None for s in unjoined)
    assert [
        s for s in index.foreign_spans(dispatch_is_root=False) if s.trace_id == step_trace
    ] == []
    assert [s for s in index.missing_parents() if s.trace_id == step_trace] == []


def test_run_job_inside_a_trainer_span_nests_job_and_dispatches(tmp_path: Path) -> None:
    out = tmp_path / "job"
    seen = _run_trainer("run_job", out)
    step_trace, step_id = seen["step"]
    assert seen["completed"] == 4 and seen["gate_after"] is False
    trainer_spans = _records(seen["spans"])
    (job,) = [s for s in trainer_spans if s.name == names.SPAN_JOB]
    assert (job.trace_id, job.parent_id) == (step_trace, step_id)
    dispatches = [s for s in trainer_spans if s.name == names.SPAN_DISPATCH]
    assert len(dispatches) == 4
    assert {(d.trace_id, d.parent_id) for d in dispatches} == {(step_trace, job.span_id)}
    assert all(s.links == () for s in trainer_spans), "nested dispatches carry no link"
    assert "trainer.after" in {s.name for s in trainer_spans}, "the trainer's provider was shut"

    run_dir = out / "run"
    rollouts = [
        orjson.loads(line) for line in (run_dir / "rollouts.jsonl").read_bytes().splitlines()
    ]
    assert {r["trace_id"] for r in rollouts} == {step_trace}
    # the launched servers export to the run's store; their spans hang under the dispatches
    stored = read_store(run_dir / "traces.db")
    index = Spans(trainer_spans + stored)
    rollout_spans = [s for s in stored if s.name == names.SPAN_ROLLOUT]
    assert len(rollout_spans) == 4
    assert all(index.owning_dispatch(s) in dispatches for s in rollout_spans)
    assert {s.service for s in stored if s.trace_id == step_trace} <= SERVER_SERVICES
    assert index.foreign_spans(dispatch_is_root=False) == []
    assert [s for s in index.missing_parents() if s.trace_id == step_trace] == []
