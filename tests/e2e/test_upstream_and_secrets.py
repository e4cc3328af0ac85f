"""A model server in front of an upstream engine, end to end, and the no-secret rule.

The ``openai`` model server proxies to another model server of the job (the simulated policy
plays the upstream engine, as vLLM would), authenticating with a key read from the
environment variable the config names. Checked on a real run: the engine's ``llm_request``
spans join each rollout's trace through the proxy, its request id names the rollout
(``chatcmpl-<rollout id>.<turn>``), and the key appears in no output file, log or span.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_helpers import TracedJob

from rollgym.telemetry import names
from server_specs import simulated_model, solver_servers

pytestmark = pytest.mark.e2e

SECRET = "sk-rollgym-test-3f9a1c7e5b2d"
ROWS = [{"question": f"{i} + {i * 3}"} for i in range(12)]


@pytest.fixture(scope="module")
def proxied_run(tmp_path_factory: pytest.TempPathFactory) -> TracedJob:
    job = TracedJob(tmp_path_factory.mktemp("upstream"))
    job.write(
        {
            "engine": simulated_model(latency_s=0.01, accuracy=1.0),
            **solver_servers(
                model={
                    "kind": "model",
                    "impl": "openai",
                    "upstream": "engine",
                    "model_name": "engine-model",
                    "api_key_env": "ROLLGYM_TEST_UPSTREAM_KEY",
                }
            ),
        },
        ROWS,
        agent="solver",
        repeats=2,
    )
    result = job.run(env={"ROLLGYM_TEST_UPSTREAM_KEY": SECRET})
    assert result.returncode == 0, result.stdout + result.stderr
    job.cli_output = result.stdout + result.stderr  # type: ignore[attr-defined]
    return job


def test_every_rollout_completes_through_the_proxy(proxied_run: TracedJob) -> None:
    summary = proxied_run.summary
    assert summary["requested"] == summary["completed"] == 2 * len(ROWS)
    assert all(r["reward"] == 1.0 for r in proxied_run.rollouts)


def test_engine_spans_join_each_rollout_trace_through_the_proxy(proxied_run: TracedJob) -> None:
    spans = proxied_run.spans()
    roots = spans.dispatch_roots()
    engine_spans = spans.named(names.SPAN_ENGINE_REQUEST)
    assert len(engine_spans) == 2 * len(ROWS)
    for engine in engine_spans:
        dispatch = spans.owning_dispatch(engine)
        assert dispatch is not None and dispatch.parent_id is None
        rollout_id = dispatch.rollout_id
        assert roots[rollout_id] is dispatch
        # engine <- engine's server span <- the proxy's client span <- proxy server span ...
        chain = [s.name for s in spans.ancestors(engine)]
        assert names.SPAN_MODEL_CHAT in chain and names.SPAN_ROLLOUT in chain
        assert engine.attributes[names.GEN_AI_REQUEST_ID] == f"chatcmpl-{rollout_id}.0"
        assert engine.attributes[names.ROLLOUT_ID] == rollout_id
    assert spans.foreign_spans() == [] and spans.missing_parents() == []


def test_the_key_is_in_no_output_file_log_or_span(proxied_run: TracedJob) -> None:
    needle = SECRET.encode()
    leaks = [
        str(path.relative_to(proxied_run.out))
        for path in Path(proxied_run.out).rglob("*")
        if path.is_file() and needle in path.read_bytes()
    ]
    assert leaks == []
    assert SECRET not in proxied_run.cli_output  # type: ignore[attr-defined]
    config = (proxied_run.out / "config.yaml").read_text()
    assert "ROLLGYM_TEST_UPSTREAM_KEY" in config  # the variable's name is kept, not its value
