"""The library API with real servers: the Collector inside a caller's span, metrics, cost when off.

The driver side runs in this test process (the :class:`~rollgym.Collector`, spans into an
in-memory exporter via ``install_for_tests``, rollout metrics into an ``InMemoryMetricReader``);
the servers are real processes launched by the real launcher and export over OTLP/HTTP to the
rollgym trace store. Both sets of spans are joined into one index and walked together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from telemetry_helpers import (
    Spans,
    from_sdk,
    launched_servers,
    quick_rows,
    quick_servers,
    read_store,
    trace_store,
)

from rollgym import Collector, RolloutResult
from rollgym.driver import dispatch as dispatch_module
from rollgym.driver.dispatch import Dispatcher
from rollgym.driver.rows import Rollout, Target, TaskRow
from rollgym.telemetry import names, spans
from rollgym.telemetry.groups import configure_gate, gate
from rollgym.telemetry.metrics import RolloutMetrics
from rollgym.telemetry.setup import install_for_tests

pytestmark = pytest.mark.e2e

AGENTS = ("solver", "walker")
ENVIRONMENTS = ("arith", "keys")
ROUTES = {"keychain_episodes": "keys"}
#: Every span helper a call site may enter (the cost-when-off test makes each one raise).
SPAN_HELPERS = (
    "startup_span",
    "server_startup_span",
    "job_span",
    "aggregate_metrics_span",
    "finalize_span",
    "dispatch_span",
    "record_dispatch_outcome",
    "rollout_span",
    "model_chat_span",
    "record_model_response",
    "engine_request_span",
    "env_seed_span",
    "env_tool_span",
    "verify_span",
    "http_client_span",
    "http_server_span",
)


@pytest.fixture
def memory() -> Iterator[tuple[InMemorySpanExporter, Any]]:
    """This process's spans into memory (every group on); the gate closed again afterwards."""
    exporter = InMemorySpanExporter()
    handle = install_for_tests(exporter)
    yield exporter, handle
    configure_gate((), tracing_active=False)


def _collector(urls: dict[str, str], **kwargs: Any) -> Collector:
    return Collector(
        {name: urls[name] for name in AGENTS + ENVIRONMENTS},
        agent="solver",
        environment_routes=ROUTES,
        agents=AGENTS,
        concurrency=8,
        timeout_s=60,
        retry_backoff_s=0.01,
        **kwargs,
    )


def _completed_by_dispatch_name(reader: InMemoryMetricReader) -> Counter[str]:
    """``gym.rollout.completed`` points summed by their ``gym.rollout.dispatch.name``."""
    found: Counter[str] = Counter()
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                if metric.name != names.METRIC_ROLLOUT_COMPLETED:
                    continue
                for point in metric.data.data_points:
                    found[str(point.attributes[names.DISPATCH_NAME])] += int(point.value)
    return found


async def test_collector_nests_each_dispatch_under_the_callers_span(
    tmp_path: Path, memory: tuple[InMemorySpanExporter, Any]
) -> None:
    exporter, handle = memory
    reader = InMemoryMetricReader()
    metrics = RolloutMetrics(MeterProvider(metric_readers=[reader]).get_meter("e2e"))
    rows = quick_rows(3, 2, 3)
    async with (
        trace_store(tmp_path) as store,
        launched_servers(quick_servers(0.0), tmp_path, traces_to=store.endpoint) as urls,
        _collector(urls, metrics=metrics, repeats=2) as collector,
    ):
        tracer = handle.tracer_provider.get_tracer("embedder")
        with tracer.start_as_current_span("embedder.step") as step:
            outcomes = [outcome async for outcome in collector.stream(rows)]
    assert spans.owned_job_span_context() is None
    assert len(outcomes) == 16 and all(isinstance(o, RolloutResult) for o in outcomes)
    step_trace = format(step.get_span_context().trace_id, "032x")
    step_id = format(step.get_span_context().span_id, "016x")
    assert {o.trace_id for o in outcomes} == {step_trace}

    local = from_sdk(exporter.get_finished_spans())
    index = Spans(local + read_store(tmp_path / "traces.db"))
    dispatches = index.named(names.SPAN_DISPATCH)
    assert len(dispatches) == len(outcomes)
    by_id = {d.rollout_id: d for d in dispatches}
    for outcome in outcomes:
        dispatch = by_id[outcome.rollout_id]
        assert (dispatch.trace_id, dispatch.parent_id) == (step_trace, step_id)
        assert dispatch.links == ()
        assert dispatch.attributes[names.DISPATCH_NAME] == outcome.dispatch_name
    # everything the servers did joined the caller's trace, under the right dispatch
    server_side = [s for s in index.all if s.service in set(AGENTS + ENVIRONMENTS) | {"policy"}]
    rollout_spans = [s for s in server_side if s.name == names.SPAN_ROLLOUT]
    assert len(rollout_spans) == len(outcomes)
    assert {s.trace_id for s in server_side if s.rollout_id} == {step_trace}
    assert index.foreign_spans(dispatch_is_root=False) == []
    assert [s for s in index.missing_parents() if s.trace_id == step_trace] == []
    assert not index.named(names.SPAN_JOB)

    # the span's dispatch name is exactly what the rollout counters recorded, both routing kinds
    span_names = Counter(d.attributes[names.DISPATCH_NAME] for d in dispatches)
    assert span_names == Counter(o.dispatch_name for o in outcomes)
    assert set(span_names) == {"solver", "walker", "keys"}
    assert _completed_by_dispatch_name(reader) == span_names


async def test_disabled_branch_never_enters_a_span_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_gate((), tracing_active=False)

    def entered(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a span helper was entered with tracing off")

    for helper in SPAN_HELPERS:
        monkeypatch.setattr(spans, helper, entered)
    with pytest.raises(AssertionError):  # the call sites look the helpers up on this module
        spans.dispatch_span({}, "solver", "solver")
    rows = quick_rows(3, 2, 3)
    async with (
        launched_servers(quick_servers(0.0), tmp_path, traces_to=None) as urls,
        _collector(urls, repeats=2) as collector,
    ):
        assert not gate.tracing and not gate.rollout
        outcomes = [outcome async for outcome in collector.stream(rows)]
    assert len(outcomes) == 16
    assert all(isinstance(o, RolloutResult) and o.reward == 1.0 for o in outcomes), outcomes
    assert all(o.trace_id is None for o in outcomes)
    assert Counter(o.dispatch_name for o in outcomes) == {"solver": 6, "walker": 4, "keys": 6}


async def test_underivable_identity_omits_the_attribute_and_the_rollout_runs(
    tmp_path: Path, memory: tuple[InMemorySpanExporter, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter, _ = memory
    original = dispatch_module.collector_row

    def malformed_row(rollout: Rollout, attempt: int) -> dict[str, Any]:
        """The collector row with identity of the wrong types: a list attempt, a str index."""
        row = original(rollout, attempt)
        row["attempt"] = [attempt]
        row["task_index"] = str(row["task_index"])
        return row

    solver = Target(dispatch_name="solver", server_name="solver", episode=False)
    listed_id = TaskRow(
        task_index=0,
        line=1,
        row={"question": "2 + 2", "rollout_id": ["not", "a", "string"]},
        explicit_id="listed",
        target=solver,
    )
    async with (
        launched_servers(quick_servers(0.0), tmp_path, traces_to=None) as urls,
        _collector(urls) as collector,
    ):
        # an explicit id that is a list, straight through the one dispatch site
        direct = Dispatcher(collector.client, {"solver": urls["solver"]}, 60.0)
        attempt = await direct.send_attempt(Rollout(listed_id, 0), 0)
        # a list attempt and a string task index, through the Collector
        monkeypatch.setattr(dispatch_module, "collector_row", malformed_row)
        rows = [{"question": "3 + 4"}, {"question": "5 * 6"}]
        outcomes = [outcome async for outcome in collector.stream(rows)]
    assert attempt.error is None and attempt.reward == 1.0
    assert len(outcomes) == 2
    assert all(isinstance(o, RolloutResult) and o.reward == 1.0 for o in outcomes), outcomes
    dispatches = [
        s for s in from_sdk(exporter.get_finished_spans()) if s.name == "gym.rollout.dispatch"
    ]
    assert len(dispatches) == 3
    for dispatch in dispatches:
        assert names.ROLLOUT_ID not in dispatch.attributes
        assert dispatch.attributes[names.DISPATCH_NAME] == "solver"
        assert dispatch.attributes[names.ROLLOUT_OUTCOME] == names.OUTCOME_OK
    assert sum(names.ROLLOUT_ATTEMPT in d.attributes for d in dispatches) == 1  # the int one
