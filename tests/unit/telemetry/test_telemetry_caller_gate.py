"""The embedder gate's predicate: which tracer providers record (the end-to-end case, a
trainer's own global provider, is in ``tests/e2e/test_telemetry_embedder.py``)."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from rollgym.telemetry.embedder import CallerTracing, records
from rollgym.telemetry.groups import gate


def test_the_api_defaults_do_not_record() -> None:
    assert not records(trace.ProxyTracerProvider())
    assert not records(trace.NoOpTracerProvider())


def test_an_sdk_provider_records_unless_the_sdk_is_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert records(TracerProvider(shutdown_on_exit=False))
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not records(TracerProvider(shutdown_on_exit=False))


def test_rollgyms_own_setup_is_left_alone(exporter) -> None:
    """With rollgym's telemetry set up in this process the Collector changes nothing."""
    before = gate.enabled_groups()
    caller = CallerTracing(["rollout"])
    assert caller.start() is False
    assert gate.enabled_groups() == before and gate.tracing
    caller.stop()
    assert gate.enabled_groups() == before and gate.tracing


def test_unknown_groups_are_refused_when_the_collector_is_built() -> None:
    with pytest.raises(ValueError, match="unknown span group 'rollouts'"):
        CallerTracing(["rollouts"])
