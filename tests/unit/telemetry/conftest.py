"""Fixtures: a real SDK provider exporting into memory, and a closed gate after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.telemetry.groups import ALL_GROUPS, configure_gate
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import install_for_tests


@pytest.fixture
def unreachable_otlp() -> TelemetrySettings:
    """Every group on, OTLP/HTTP to a port nobody listens on, short export timeouts: a real
    pipeline that records and then fails its exports quickly."""
    return TelemetrySettings(
        groups=ALL_GROUPS,
        traces_exporter="otlp",
        endpoint="http://127.0.0.1:9",
        export_timeout_s=0.5,
        schedule_delay_ms=10,
    )


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Every group on; spans land in the returned exporter as they end."""
    out = InMemorySpanExporter()
    install_for_tests(out)
    yield out
    configure_gate((), tracing_active=False)


@pytest.fixture(autouse=True)
def _closed_gate_after() -> Iterator[None]:
    yield
    configure_gate((), tracing_active=False)


@pytest.fixture
def named(exporter: InMemorySpanExporter) -> Callable[[str], list[ReadableSpan]]:
    """``named("gym.job")``: the finished spans of that name, in end order."""

    def find(name: str) -> list[ReadableSpan]:
        return [s for s in exporter.get_finished_spans() if s.name == name]

    return find
