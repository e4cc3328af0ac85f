"""Connection-pool metrics and the client span through the real HttpClient and a loopback server."""

from __future__ import annotations

import asyncio

from aiohttp import web
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aiohttp_loopback import serve_on_loopback
from rollgym.http.client import HttpClient
from rollgym.telemetry import spans
from rollgym.telemetry.groups import PRESETS
from rollgym.telemetry.settings import TelemetrySettings
from rollgym.telemetry.setup import setup_telemetry


async def _server(seen: list[dict[str, str]]) -> tuple[web.AppRunner, str]:
    async def run(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        await asyncio.sleep(0.2)
        return web.json_response({"reward": 1.0})

    app = web.Application()
    app.router.add_post("/run", run)
    runner, port = await serve_on_loopback(app)
    return runner, f"http://127.0.0.1:{port}/run"


def _points(reader: InMemoryMetricReader, name: str) -> list:  # type: ignore[type-arg]
    out = []
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    out.extend(m.data.data_points)
    return out


async def test_queue_duration_and_connections_through_the_pool():
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        TelemetrySettings(groups=PRESETS["minimal"], traces_exporter="otlp"),
        service_name="d",
        run_id="r",
        span_exporter=exporter,
        metric_reader=reader,
    )
    seen: list[dict[str, str]] = []
    runner, url = await _server(seen)
    try:
        async with HttpClient(limit=1, metrics=handle.http_metrics) as client:
            with spans.dispatch_span({"task_index": 1}, "agent", "agent") as d:
                answers = await asyncio.gather(
                    client.post_json("agent", url, {"a": 1}, route="/run"),
                    client.post_json("agent", url, {"a": 2}, route="/run"),
                )
        assert [a.data for a in answers] == [{"reward": 1.0}, {"reward": 1.0}]
        (queue,) = _points(reader, "gym.http.client.queue_duration")
        assert dict(queue.attributes) == {"gym.http.destination.server.name": "agent"}
        assert queue.count == 2
        assert queue.max >= 0.15  # the second request waited for the single pooled connection
        (conns,) = _points(reader, "gym.http.client.connections")
        assert conns.value == 0
        # traceparent went out, from the client span inside this dispatch's trace
        trace_hex = format(d.get_span_context().trace_id, "032x")
        assert all(h["traceparent"].split("-")[1] == trace_hex for h in seen)
        handle.shutdown()  # flush the batch processor
        clients = [s for s in exporter.get_finished_spans() if s.name == "POST /run"]
        assert len(clients) == 2
        assert all(c.attributes["http.response.status_code"] == 200 for c in clients)
        # each request's wait for the one pooled connection lands on its own client span
        waits = sorted(c.attributes["gym.http.client.queue_duration"] for c in clients)
        assert waits[0] < 0.15 <= waits[1]
    finally:
        await runner.cleanup()
        handle.shutdown()


async def test_no_traceparent_when_tracing_is_off():
    seen: list[dict[str, str]] = []
    runner, url = await _server(seen)
    try:
        async with HttpClient() as client:
            answer = await client.post_json("agent", url, {})
        assert answer.trace_id is None
        assert "traceparent" not in {k.lower() for k in seen[0]}
    finally:
        await runner.cleanup()
