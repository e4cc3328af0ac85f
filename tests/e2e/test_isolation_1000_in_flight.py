"""Context isolation with 1,000 rollouts in flight at once through agent, model and environment.

The simulated model holds every generation for a fixed time (``asyncio.sleep``: no CPU), long
enough that the driver admits all 1,000 before the first finishes; the overlap is measured from
``rollouts.jsonl`` rather than assumed. Then every exported span is checked: zero foreign spans,
zero missing parents, zero dropped, and ``rollgym traces check`` agrees.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import max_overlap
from telemetry_helpers import TracedJob, simulated_model

from rollgym.telemetry import names
from server_specs import quickstart_servers

pytestmark = pytest.mark.e2e

IN_FLIGHT = 1000
ROLLOUTS = 1500
#: Seconds each generation is held: admitting 1,000 rollouts (seed, chat) takes ~5 s on 2 cores.
MODEL_LATENCY_S = 8.0


def test_isolation_holds_with_1000_rollouts_in_flight(tmp_path: Path) -> None:
    job = TracedJob(tmp_path)
    servers = quickstart_servers(model=simulated_model(MODEL_LATENCY_S), keys=None, walker=None)
    rows = [{"question": f"{i} + {i % 97}"} for i in range(ROLLOUTS)]
    job.write(servers, rows, agent="solver", concurrency=IN_FLIGHT, timeout_s=120)
    proc = job.run(timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == ROLLOUTS and job.summary["failed"] == 0
    assert all(r["reward"] == 1.0 for r in records)
    assert max_overlap(records) >= IN_FLIGHT

    summary = job.summary
    assert summary["telemetry"]["spans_dropped"] == 0
    spans = job.spans()
    assert summary["telemetry"]["spans_exported"] == len(spans.all)
    roots = spans.dispatch_roots()
    assert set(roots) == {r["rollout_id"] for r in records}
    for record in records:
        assert roots[record["rollout_id"]].trace_id == record["trace_id"]
    carrying = [s for s in spans.all if s.rollout_id is not None]
    # dispatch, gym.rollout, seed, chat, the model server's span, engine, verify: every one
    # of them per rollout
    per_rollout = {
        names.SPAN_DISPATCH,
        names.SPAN_ROLLOUT,
        names.SPAN_ENV_SEED,
        names.SPAN_MODEL_CHAT,
        "POST /r/{rollout_id}/v1/chat/completions",
        names.SPAN_ENGINE_REQUEST,
        names.SPAN_VERIFY,
    }
    assert {s.name for s in carrying} == per_rollout
    assert len(carrying) == len(per_rollout) * ROLLOUTS
    assert spans.foreign_spans() == []
    assert spans.missing_parents() == []
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]


#: The SDK agent's generations are held longer: its rollouts cost more CPU to admit.
SDK_MODEL_LATENCY_S = 15.0


def test_isolation_holds_with_1000_sdk_rollouts_in_flight(tmp_path: Path) -> None:
    """The same with the agent written with the real OpenAI SDK (``rollout.async_openai()``,
    one client per rollout over the process's shared pool): every rollout completes, each
    request id names its own rollout, and no span leaves its rollout's trace."""
    job = TracedJob(tmp_path)
    servers = quickstart_servers(
        model=simulated_model(SDK_MODEL_LATENCY_S),
        keys=None,
        walker=None,
        solver=None,
        sdk={
            "kind": "agent",
            "impl": "telemetry_agents:SdkAgent",
            "model": "policy",
            "environment": "arith",
        },
    )
    rows = [{"question": f"{i} + {i % 97}"} for i in range(IN_FLIGHT)]
    job.write(servers, rows, agent="sdk", concurrency=IN_FLIGHT, timeout_s=120, max_attempts=1)
    proc = job.run(timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == IN_FLIGHT and job.summary["failed"] == 0
    assert all(r["reward"] == 1.0 for r in records)
    assert max_overlap(records) >= IN_FLIGHT * 0.9
    for record in records:
        assert record["result"]["completion_id"] == f"chatcmpl-{record['rollout_id']}.0"

    assert job.summary["telemetry"]["spans_dropped"] == 0
    spans = job.spans()
    roots = spans.dispatch_roots()
    chats = spans.named(names.SPAN_MODEL_CHAT)
    engines = spans.named(names.SPAN_ENGINE_REQUEST)
    assert len(chats) == len(engines) == IN_FLIGHT
    for span in chats + engines:
        assert roots[span.rollout_id].trace_id == span.trace_id
    assert spans.foreign_spans() == []
    assert spans.missing_parents() == []
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
