"""The gate: group enabled AND a trace exporter active; presets choose spans, not shape."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.telemetry.groups import PRESETS, SpanGroup, gate
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import is_trace_exporter_active, setup_telemetry


def _two(counts: dict) -> dict:
    """The delivered/dropped pair of a span-count record (it also has unknown and reasons)."""
    return {key: counts[key] for key in ("spans_exported", "spans_dropped")}


def _setup(**kw: object):
    return setup_telemetry(TelemetrySettings(**kw), service_name="t", run_id="r")  # type: ignore[arg-type]


def test_no_exporter_closes_every_flag():
    handle = _setup(groups=PRESETS["default"], traces_exporter="none")
    assert not is_trace_exporter_active()
    assert gate.enabled_groups() == frozenset() and not gate.tracing
    assert _two(handle.counts()) == {"spans_exported": 0, "spans_dropped": 0}
    assert handle.metrics is None and handle.http_metrics is None
    handle.shutdown()


def test_all_groups_off_with_exporter_keeps_tracing_for_propagation():
    handle = setup_telemetry(
        TelemetrySettings(groups=PRESETS["off"], traces_exporter="otlp"),
        service_name="t",
        run_id="r",
        span_exporter=InMemorySpanExporter(),
    )
    assert gate.tracing and is_trace_exporter_active()
    assert gate.enabled_groups() == frozenset()
    handle.shutdown()
    assert not gate.tracing  # shutdown closes the gate


def test_presets_open_exactly_their_groups():
    for preset, groups in PRESETS.items():
        handle = setup_telemetry(
            TelemetrySettings(groups=groups, traces_exporter="otlp"),
            service_name="t",
            run_id="r",
            span_exporter=InMemorySpanExporter(),
        )
        assert gate.enabled_groups() == groups, preset
        handle.shutdown()
    assert PRESETS["per_rollout"] == frozenset(SpanGroup) - {SpanGroup.JOB, SpanGroup.STARTUP}
    assert PRESETS["minimal"] == {SpanGroup.ROLLOUT, SpanGroup.HTTP}


def test_metrics_only_process_has_recorders_but_no_span_gate():
    handle = setup_telemetry(
        TelemetrySettings(groups=PRESETS["default"]),
        service_name="t",
        run_id="r",
        metric_reader=InMemoryMetricReader(),
    )
    assert not gate.tracing and gate.enabled_groups() == frozenset()
    assert handle.metrics is not None and handle.http_metrics is not None
    handle.shutdown()
