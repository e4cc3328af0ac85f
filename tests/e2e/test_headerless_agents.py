"""An agent that forwards no headers joins its rollout's trace through the URL it is given.

``agents:UntracedScopedAgent`` posts its model call with a plain aiohttp session to
``rollout.model_base_url`` (``/r/<rollout id>/<traceparent>/v1``): no ``traceparent``, no
``X-Request-Id``. With 500 rollouts in flight at once, each model server span must sit under
that rollout's ``gym.rollout`` span (not start a trace of its own), and ``rollgym traces check``
must pass. The documented ``/r/<rollout id>/v1`` form keeps working (attribution, no parent).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_helpers import TracedJob, simulated_model

from rollgym.telemetry import names

pytestmark = pytest.mark.e2e

IN_FLIGHT = 500
#: Seconds each generation is held (no CPU): long enough that all 500 are admitted at once.
MODEL_LATENCY_S = 5.0
SCOPED_SPAN = "POST /r/{rollout_id}/v1/chat/completions"


def test_headerless_agents_join_their_rollout_traces_at_500_in_flight(tmp_path: Path) -> None:
    job = TracedJob(tmp_path)
    servers = {
        "policy": simulated_model(MODEL_LATENCY_S),
        "bare": {"kind": "agent", "impl": "agents:UntracedScopedAgent", "model": "policy"},
    }
    job.write(servers, [{"q": i} for i in range(IN_FLIGHT)], agent="bare", concurrency=IN_FLIGHT)
    proc = job.run(timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = job.rollouts
    assert len(records) == IN_FLIGHT and job.summary["failed"] == 0
    # the agent really sent no tracing header
    assert all("traceparent" not in r["result"]["sent_headers"] for r in records)
    assert all("x-request-id" not in r["result"]["sent_headers"] for r in records)
    overlap = sum(1 for r in records if r["started_at"] <= min(x["finished_at"] for x in records))
    assert overlap >= IN_FLIGHT * 0.9, f"only {overlap} rollouts were in flight at once"

    spans = job.spans()
    model_spans = spans.named(SCOPED_SPAN)
    assert len(model_spans) == IN_FLIGHT
    for span in model_spans:
        parent = spans.parent(span)
        assert parent is not None and parent.name == names.SPAN_ROLLOUT, span
        assert parent.rollout_id == span.rollout_id
        root = spans.root(span)
        assert root.name == names.SPAN_DISPATCH and root.rollout_id == span.rollout_id
    assert spans.foreign_spans() == []
    assert spans.missing_parents() == []
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    # no health poll made a trace of its own
    assert not [s for s in spans.all if s.name.startswith("GET /health")]
