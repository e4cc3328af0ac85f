"""Providers: resource attributes, single-trace ids, sampling per rollout, metric instruments."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.telemetry import spans
from rollgym.telemetry.groups import PRESETS
from rollgym.telemetry.sampling import run_trace_id
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import install_for_tests, setup_telemetry


def _two(counts: dict) -> dict:
    """The delivered/dropped pair of a span-count record (it also has unknown and reasons)."""
    return {key: counts[key] for key in ("spans_exported", "spans_dropped")}


def _handle(exporter, **settings):  # type: ignore[no-untyped-def]
    base = {"groups": PRESETS["default"], "traces_exporter": "otlp", "schedule_delay_ms": 10}
    return setup_telemetry(
        TelemetrySettings(**{**base, **settings}),
        service_name="rollgym-agent",
        run_id="run-42",
        server_name="agent_a",
        server_kind="agent",
        span_exporter=exporter,
    )


def test_resource_attributes_on_every_span(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    exporter = InMemorySpanExporter()
    handle = _handle(exporter)
    with spans.rollout_span("1-0"):
        pass
    handle.shutdown()
    (span,) = exporter.get_finished_spans()
    attrs = span.resource.attributes
    assert attrs["service.name"] == "rollgym-agent"
    assert attrs["gym.run.id"] == "run-42"
    assert attrs["gym.server.name"] == "agent_a"
    assert attrs["gym.server.kind"] == "agent"
    assert attrs["deployment.environment"] == "test"
    assert _two(handle.counts()) == {"spans_exported": 1, "spans_dropped": 0}


def test_replicas_of_one_server_differ_only_by_service_instance_id(monkeypatch):
    """Two replicas' metric points: one server by ``gym.server.name``, two streams apart."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    resources = []
    for instance in ("env", "env@1"):
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            TelemetrySettings(groups=PRESETS["default"], traces_exporter="none"),
            service_name="env",
            run_id="run-42",
            server_name="env",
            server_kind="environment",
            server_instance=instance,
            metric_reader=reader,
        )
        handle.http_metrics.request_started("arith")
        data = reader.get_metrics_data()
        handle.shutdown()
        resources.append(dict(data.resource_metrics[0].resource.attributes))
    first, second = resources
    assert first["service.instance.id"] == "run-42:env"
    assert second["service.instance.id"] == "run-42:env@1"
    assert {k: v for k, v in first.items() if k != "service.instance.id"} == {
        k: v for k, v in second.items() if k != "service.instance.id"
    }
    assert first["gym.server.name"] == "env"


def test_otel_service_name_wins(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-trainer")
    exporter = InMemorySpanExporter()
    handle = _handle(exporter)
    with spans.rollout_span(None):
        pass
    handle.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.resource.attributes["service.name"] == "my-trainer"
    assert span.resource.attributes["gym.run.id"] == "run-42"


def test_single_trace_mode_puts_every_root_in_the_run_trace():
    exporter = InMemorySpanExporter()
    install_for_tests(exporter, run_id="run-7", single_trace=True)
    with spans.job_span("run-7"):
        for i in range(3):
            with spans.dispatch_span({"task_index": i}, "a", "a"):
                pass
    with spans.startup_span():
        pass
    finished = exporter.get_finished_spans()
    assert len(finished) == 5
    assert {s.context.trace_id for s in finished} == {run_trace_id("run-7")}
    assert len({s.context.span_id for s in finished}) == 5
    assert run_trace_id("run-7") != run_trace_id("run-8")


def test_sampling_is_decided_per_rollout(monkeypatch):
    exporter = InMemorySpanExporter()
    handle = _handle(exporter, sampler="traceidratio", sampler_arg="0.5")
    with spans.job_span("run-42"):
        for i in range(200):
            with spans.dispatch_span({"task_index": i}, "a", "a"), spans.rollout_span(f"{i}-0"):
                pass
    handle.shutdown()
    finished = exporter.get_finished_spans()
    dispatches = [s for s in finished if s.name == "gym.rollout.dispatch"]
    rollouts = [s for s in finished if s.name == "gym.rollout"]
    assert 40 < len(dispatches) < 160  # each rollout trace decided on its own
    assert {r.context.trace_id for r in rollouts} == {d.context.trace_id for d in dispatches}


def test_trace_ids_are_time_ordered_and_ratio_sampling_still_holds():
    """The ratio sampler decides on the low 64 bits, which stay random under the time prefix:
    every trace of one second shares its top 32 bits, yet about half are kept."""
    exporter = InMemorySpanExporter()
    handle = _handle(exporter, sampler="traceidratio", sampler_arg="0.5")
    before = int(time.time())
    for i in range(2000):
        with spans.dispatch_span({"task_index": i}, "a", "a"):
            pass
    handle.shutdown()
    after = int(time.time())
    kept = [s.context.trace_id for s in exporter.get_finished_spans()]
    assert all(before <= trace_id >> 96 <= after for trace_id in kept)
    assert 800 < len(kept) < 1200  # 0.5 of 2,000: outside this is ~1e-19 likely


@pytest.mark.parametrize("sampler", ["always_off", "parentbased_always_off"])
def test_always_off_exports_nothing_but_job_is_still_linkable(sampler):
    exporter = InMemorySpanExporter()
    handle = _handle(exporter, sampler=sampler)
    with spans.job_span("run-42") as job:
        assert job.get_span_context().is_valid and not job.is_recording()
        assert spans.owned_job_span_context() == job.get_span_context()
    handle.shutdown()
    assert exporter.get_finished_spans() == ()


def _points(reader: InMemoryMetricReader) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def test_rollout_metrics_instruments():
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        TelemetrySettings(), service_name="d", run_id="r", metric_reader=reader
    )
    m = handle.metrics
    assert m is not None
    for _ in range(3):
        m.started("agent_a")
    m.finished("agent_a", "ok", 1.0, 0.5)
    m.finished("agent_a", "ok", 0.0, 1.5)
    m.finished("agent_a", "timeout", None, 9.0)
    m.started("env_b")
    points = _points(reader)
    completed = {
        (p.attributes["gym.rollout.dispatch.name"], p.attributes["gym.rollout.outcome"]): p.value
        for p in points["gym.rollout.completed"]
    }
    assert completed == {("agent_a", "ok"): 2, ("agent_a", "timeout"): 1}
    in_flight = {
        p.attributes["gym.rollout.dispatch.name"]: p.value for p in points["gym.rollout.in_flight"]
    }
    assert in_flight == {"agent_a": 0, "env_b": 1}
    (reward,) = points["gym.rollout.reward"]
    assert reward.count == 2 and reward.sum == 1.0
    assert dict(reward.attributes) == {"gym.rollout.dispatch.name": "agent_a"}
    durations = {p.attributes["gym.rollout.outcome"]: p.sum for p in points["gym.rollout.duration"]}
    assert durations == {"ok": 2.0, "timeout": 9.0}
    handle.shutdown()


class _StalledExporter(InMemorySpanExporter):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, batch):  # type: ignore[no-untyped-def]
        self.release.wait(10)
        return super().export(batch)


def test_dropped_counter_is_exported_as_a_metric():
    reader = InMemoryMetricReader()
    exporter = _StalledExporter()
    handle = setup_telemetry(
        TelemetrySettings(
            groups=PRESETS["default"],
            traces_exporter="otlp",
            max_queue_size=2,
            max_export_batch_size=2,
            schedule_delay_ms=60_000,
        ),
        service_name="d",
        run_id="r",
        span_exporter=exporter,
        metric_reader=reader,
    )
    for i in range(10):
        with spans.rollout_span(str(i)):
            pass
    dropped = {
        p.attributes["reason"]: p.value for p in _points(reader)["gym.telemetry.spans.dropped"]
    }
    assert dropped["queue_full"] == handle.dropped_by_reason()["queue_full"] >= 6
    exporter.release.set()
    handle.shutdown()
    counts = handle.counts()
    assert counts["spans_exported"] + counts["spans_dropped"] == 10
    assert counts["spans_exported"] == len(exporter.get_finished_spans())


def test_the_flush_limit_counts_from_the_end_of_the_rollouts() -> None:
    """The driver shuts down after its servers waited on the same backend: what is left of its
    limit, never less than the floor for its last spans; without an end noted, the whole limit."""
    from rollgym.telemetry.setup import LAST_SPANS_FLOOR_S, shutdown_budget

    assert shutdown_budget(60.0, None, now=100.0) == 60.0
    assert shutdown_budget(60.0, 100.0, now=110.0) == 50.0
    assert shutdown_budget(60.0, 100.0, now=200.0) == LAST_SPANS_FLOOR_S
    assert shutdown_budget(2.0, 100.0, now=200.0) == 2.0
