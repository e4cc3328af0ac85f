"""Agents that know only the OpenAI API stay in their rollout's trace, through the proxy.

Two agents of the test's own run real jobs behind the ``openai`` proxy (a simulated engine
upstream, as vLLM would be): one written with the official OpenAI SDK through
``rollout.async_openai()``, one that posts to the rollout-scoped URL with no request id at
all. Both are attributed: the engine's request ids are ``chatcmpl-<rollout id>.<turn>``, the
proxy's server span carries ``gym.rollout.id``, and ``rollgym traces check`` passes.
"""

from __future__ import annotations

import pytest
from telemetry_helpers import TracedJob

from rollgym.telemetry import names
from server_specs import agent_spec, proxied_servers, simulated_model

pytestmark = pytest.mark.e2e

ROWS = [{"question": f"{i} * 3", "agent": agent} for i in range(6) for agent in ("sdk", "bare")]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> TracedJob:
    job = TracedJob(tmp_path_factory.mktemp("openai_clients"))
    job.write(
        proxied_servers(
            simulated_model(latency_s=0.01, accuracy=1.0),
            "m",
            solver=None,
            sdk=agent_spec("telemetry_agents:SdkAgent", "arith"),
            bare=agent_spec("telemetry_agents:HeaderlessAgent", "arith"),
        ),
        ROWS,
        repeats=2,
    )
    result = job.run()
    assert result.returncode == 0, result.stdout + result.stderr
    return job


def test_every_rollout_completes_with_the_right_answer(run: TracedJob) -> None:
    assert run.summary["completed"] == run.summary["requested"] == 2 * len(ROWS)
    assert all(r["reward"] == 1.0 for r in run.rollouts)


def test_request_ids_name_the_rollout_and_its_turn(run: TracedJob) -> None:
    for rollout in run.rollouts:
        rollout_id, result = rollout["rollout_id"], rollout["result"]
        if rollout["dispatch_name"] == "sdk":
            assert result["completion_id"] == f"chatcmpl-{rollout_id}.0"
        else:  # header-less: the proxy numbered the turns itself
            assert result["completion_ids"] == [f"chatcmpl-{rollout_id}.{t}" for t in (0, 1)]


def test_spans_sit_in_their_rollout_trace_and_the_check_passes(run: TracedJob) -> None:
    spans = run.spans()
    engines = spans.named(names.SPAN_ENGINE_REQUEST)
    assert len(engines) == 6 * 2 + 6 * 2 * 2  # sdk: one call per rollout; bare: two
    for engine in engines:
        dispatch = spans.owning_dispatch(engine)
        assert dispatch is not None and dispatch.rollout_id == engine.rollout_id
        # the proxy's call upstream, GenAI-named (the agent's side is gym.model.chat)
        assert "chat m" in [s.name for s in spans.ancestors(engine)]
    proxy_servers = [
        s
        for s in spans.all
        if s.service == "policy" and s.kind == "SERVER" and s.name.startswith("POST /r/")
    ]
    assert len(proxy_servers) == len(engines)
    for server in proxy_servers:
        assert server.rollout_id == spans.owning_dispatch(server).rollout_id
    assert spans.foreign_spans() == [] and spans.missing_parents() == []
    check = run.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr
