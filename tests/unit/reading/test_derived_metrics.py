"""The run's metrics read back from its trace store, against what the instruments recorded.

Real parts throughout: the HTTP client's own metrics through an in-memory reader, its spans
exported over OTLP into a real store process, and a synthetic run whose rollouts are known.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from aiohttp_loopback import serve_on_loopback
from rollgym.http.client import HttpClient
from rollgym.identity import base_rollout_id, make_rollout_id
from rollgym.reading.derived_metrics import DERIVED, NOT_DERIVED, derive_metrics
from rollgym.reading.profile import open_store
from rollgym.telemetry import metrics, names, spans
from rollgym.telemetry.groups import PRESETS
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import setup_telemetry
from rollgym.tracestore.store_process import TraceStoreProcess
from synthetic_run import SyntheticRun


def _points(reader: InMemoryMetricReader, name: str) -> list:  # type: ignore[type-arg]
    return [
        point
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for point in m.data.data_points
    ]


def test_every_metric_is_derived_or_says_why_not() -> None:
    emitted = {v for k, v in vars(names).items() if k.startswith("METRIC_")}
    assert set(DERIVED) | set(NOT_DERIVED) == emitted
    assert not set(DERIVED) & set(NOT_DERIVED)
    assert metrics  # the module that creates them all


def test_base_rollout_id_inverts_every_attempt() -> None:
    for explicit in (None, "custom", "x-a1"):
        for attempt in range(4):
            made = make_rollout_id(explicit, 3, 2, attempt)
            assert base_rollout_id(made, attempt) == make_rollout_id(explicit, 3, 2, 0)


async def test_http_metrics_match_the_instruments(store: TraceStoreProcess) -> None:
    async def run(_request: web.Request) -> web.Response:
        await asyncio.sleep(0.1)
        return web.json_response({"reward": 1.0})

    app = web.Application()
    app.router.add_post("/run", run)
    runner, port = await serve_on_loopback(app)
    url = f"http://127.0.0.1:{port}/run"
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        TelemetrySettings(groups=PRESETS["minimal"], traces_exporter="otlp"),
        service_name="d",
        run_id="r",
        span_exporter=OTLPSpanExporter(endpoint=store.traces_endpoint),
        metric_reader=reader,
    )
    try:
        async with HttpClient(limit=1, metrics=handle.http_metrics) as client:
            with spans.dispatch_span({"task_index": 1}, "agent", "agent"):
                await asyncio.gather(
                    *(client.post_json("agent", url, {"a": i}, route="/run") for i in range(3))
                )
        (recorded,) = _points(reader, names.METRIC_HTTP_CLIENT_QUEUE_DURATION)
    finally:
        handle.shutdown()
        await runner.cleanup()
    db = Path(store.db_path)
    store.stop()
    conn = open_store(db)
    try:
        derived = derive_metrics(conn)
    finally:
        conn.close()
    (queue,) = derived[names.METRIC_HTTP_CLIENT_QUEUE_DURATION]
    assert queue["attributes"] == dict(recorded.attributes)
    assert queue["count"] == recorded.count == 3
    # the same wait timed at two points: the span around the connector's connect, the
    # metric from the request's start (its own overhead too, large on a loaded machine)
    assert queue["sum"] == pytest.approx(recorded.sum, rel=0.25, abs=0.02)
    assert queue["max"] >= 0.15  # the third request waited for two others on one connection
    (connections,) = derived[names.METRIC_HTTP_CLIENT_CONNECTIONS]
    assert connections == {"attributes": dict(recorded.attributes), "value": 3}


def test_rollout_metrics_of_a_synthetic_run(finished_run: tuple[Path, SyntheticRun]) -> None:
    run_dir, run = finished_run
    conn = open_store(run_dir / "traces.db")
    try:
        derived = derive_metrics(conn)
    finally:
        conn.close()
    completed = {
        p["attributes"][names.ROLLOUT_OUTCOME]: p["value"]
        for p in derived[names.METRIC_ROLLOUT_COMPLETED]
    }
    # one point per rollout (its last attempt), not per attempt
    assert completed == {
        names.OUTCOME_OK: len(run.rollouts),
        names.OUTCOME_ERROR: len(run.failures),
    }
    (reward,) = derived[names.METRIC_ROLLOUT_REWARD]
    assert reward["count"] == len(run.rollouts)
    assert reward["sum"] == pytest.approx(sum(r["reward"] for r in run.rollouts))
    ok = next(
        p
        for p in derived[names.METRIC_ROLLOUT_DURATION]
        if p["attributes"][names.ROLLOUT_OUTCOME] == names.OUTCOME_OK
    )
    retried = {r["rollout_id"] for r in run.rollouts if r["attempt"] > 0}
    single = sum(r["duration_s"] for r in run.rollouts if r["rollout_id"] not in retried)
    assert ok["count"] == len(run.rollouts)
    assert ok["sum"] > single  # retried rollouts span both attempts
    (in_flight,) = derived[names.METRIC_ROLLOUT_IN_FLIGHT]
    assert 1 <= in_flight["value"] < len(run.rollouts) + len(run.failures)
