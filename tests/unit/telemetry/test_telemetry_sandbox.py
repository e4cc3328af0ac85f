"""``gym.sandbox.*`` spans (group ``sandbox``) and the pool's metrics, from a real pool."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.sandbox import SandboxLimits, SandboxPool, unavailable_reason
from rollgym.telemetry import names
from rollgym.telemetry.groups import SpanGroup, configure_gate
from rollgym.telemetry.metrics import SandboxMetrics
from rollgym.telemetry.setup import install_for_tests

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
LIMITS = SandboxLimits(wall_s=20, output_bytes=4096)


async def test_create_exec_destroy_spans_carry_the_outcome(
    named: Callable[[str], list[ReadableSpan]],
) -> None:
    pool = SandboxPool(LIMITS, warm=1)
    await pool.start()
    try:
        sandbox = await pool.acquire("7-0")
        await sandbox.exec("echo hello; exit 4")
        await sandbox.exec(["yes"])
        await pool.release(sandbox)
    finally:
        await pool.close()
    (create,) = named(names.SPAN_SANDBOX_CREATE)
    first, flood = named(names.SPAN_SANDBOX_EXEC)
    (destroy,) = named(names.SPAN_SANDBOX_DESTROY)
    assert create.attributes is not None and first.attributes is not None
    assert flood.attributes is not None and destroy.attributes is not None
    assert create.attributes[names.ROLLOUT_ID] == "7-0" and create.attributes[names.SANDBOX_WARM]
    sandbox_id = create.attributes[names.SANDBOX_ID]
    assert first.attributes[names.SANDBOX_ID] == sandbox_id == destroy.attributes[names.SANDBOX_ID]
    assert first.attributes[names.SANDBOX_EXIT_CODE] == 4
    assert first.attributes[names.SANDBOX_STDOUT_BYTES] == 6
    assert first.attributes[names.SANDBOX_TIMED_OUT] is False
    assert first.attributes[names.SANDBOX_KILLED] is False
    assert names.SANDBOX_LIMIT not in first.attributes
    assert first.attributes[names.SANDBOX_WALL_TIME] > 0
    assert first.attributes[names.SANDBOX_COMMAND] == "sh"
    assert flood.attributes[names.SANDBOX_LIMIT] == "output"
    assert flood.attributes[names.SANDBOX_KILLED] is True
    assert flood.attributes[names.SANDBOX_OUTPUT_TRUNCATED] is True
    assert flood.attributes[names.SANDBOX_COMMAND] == "yes"


async def test_the_sandbox_group_off_means_no_sandbox_spans() -> None:
    exporter = InMemorySpanExporter()
    install_for_tests(exporter, groups=set(SpanGroup) - {SpanGroup.SANDBOX})
    pool = SandboxPool(LIMITS, warm=0)
    await pool.start()
    try:
        sandbox = await pool.acquire("1-0")
        result = await sandbox.exec(["true"])
        await pool.release(sandbox)
    finally:
        await pool.close()
        configure_gate((), tracing_active=False)
    assert result.ok and exporter.get_finished_spans() == ()


async def test_pool_metrics_size_waiting_and_exec_durations() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    holder: dict[str, SandboxPool] = {}
    metrics = SandboxMetrics(
        provider.get_meter("test"),
        ready=lambda: holder["pool"].ready,
        waiting=lambda: holder["pool"].waiting,
    )
    pool = holder["pool"] = SandboxPool(LIMITS, warm=2, metrics=metrics)
    await pool.start()
    try:
        sandbox = await pool.acquire(None)
        await sandbox.exec(["true"])
        await sandbox.exec(["true"])
    finally:
        await pool.close()
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: list(metric.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert points[names.METRIC_SANDBOX_EXEC_DURATION][0].count == 2
    assert names.METRIC_SANDBOX_POOL_SIZE in points
    assert points[names.METRIC_SANDBOX_POOL_WAITING][0].value == 0
    provider.shutdown()
