"""The shared ASGI edge: health, body limit, validation errors, telemetry middleware."""

from __future__ import annotations

import aiohttp
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from rollgym.errors import HTTPError
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server
from rollgym.telemetry import names
from rollgym.telemetry.groups import configure_gate, gate


class Item(BaseModel):
    name: str
    count: int


class EchoServer(Server):
    kind = "environment"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/items/{item_id}")
        async def items(item_id: str, item: Item) -> OrjsonResponse:
            return OrjsonResponse({"id": item_id, "name": item.name, "count": item.count})

        @app.post("/refuse")
        async def refuse() -> OrjsonResponse:
            raise HTTPError(409, "already there", field="name")

        @app.post("/crash")
        async def crash() -> OrjsonResponse:
            raise RuntimeError("boom")

        @app.post("/current")
        async def current() -> OrjsonResponse:
            context = trace.get_current_span().get_span_context()
            return OrjsonResponse({"trace_id": format(context.trace_id, "032x")})


def echo(limit: int = 2048) -> EchoServer:
    return EchoServer.build("echo", {}, max_request_bytes=limit)  # type: ignore[return-value]


async def test_health_names_the_server(serving, client):
    async with serving(echo()) as url:
        response = await client.get_json("echo", url + "/health")
    assert response.status == 200
    assert response.data == {"status": "ok", "name": "echo", "kind": "environment"}


async def test_validation_error_is_400_with_dotted_field(serving, client):
    async with serving(echo()) as url:
        response = await client.post_json("echo", url + "/items/a", {"name": "x", "count": "many"})
    assert response.status == 400
    assert response.data["field"] == "body.count"
    assert "count" in response.data["error"]


async def test_http_error_and_unexpected_error_shapes(serving, client):
    async with serving(echo()) as url:
        refused = await client.post_json("echo", url + "/refuse", {})
        crashed = await client.post_json("echo", url + "/crash", {})
    assert (refused.status, refused.data) == (409, {"error": "already there", "field": "name"})
    assert crashed.status == 500
    assert "RuntimeError: boom" in crashed.data["error"]


async def test_oversized_body_by_content_length_is_413_naming_the_limit(serving, client):
    async with serving(echo(limit=2048)) as url:
        response = await client.post_json(
            "echo", url + "/items/a", {"name": "x" * 5000, "count": 1}
        )
        small = await client.post_json("echo", url + "/items/a", {"name": "x", "count": 1})
    assert response.status == 413
    assert response.data["field"] == "body"
    assert "2048" in response.data["error"] and "5" in response.data["error"]
    assert small.status == 200


async def test_oversized_chunked_body_is_counted_and_refused(serving):
    async def chunks(total: int):
        for _ in range(total // 512):
            yield b"x" * 512

    async with serving(echo(limit=2048)) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/items/a", data=chunks(8192)) as resp:
            assert resp.status == 413
            body = await resp.json()
        ok_body = b'{"name": "chunky", "count": 2}'

        async def small():
            yield ok_body[:10]
            yield ok_body[10:]

        async with session.post(
            url + "/items/b", data=small(), headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 200
            assert (await resp.json()) == {"id": "b", "name": "chunky", "count": 2}
    assert "more than 2048 bytes" in body["error"]


async def test_server_span_joins_the_callers_trace_with_route_template(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    assert gate.http
    async with serving(echo()) as url:
        response = await client.post_json("echo", url + "/items/abc", {"name": "n", "count": 1})
    spans = exporter.get_finished_spans()
    server = [s for s in spans if s.kind == trace.SpanKind.SERVER]
    client_spans = [s for s in spans if s.kind == trace.SpanKind.CLIENT]
    assert response.status == 200 and server and client_spans
    assert server[0].name == "POST /items/{item_id}"
    assert server[0].attributes[names.HTTP_ROUTE] == "/items/{item_id}"
    assert server[0].attributes[names.HTTP_RESPONSE_STATUS_CODE] == 200
    assert server[0].context.trace_id == client_spans[0].context.trace_id
    assert server[0].parent.span_id == client_spans[0].context.span_id


async def test_tracing_without_http_group_still_attaches_callers_context(serving, client):
    from opentelemetry.sdk.trace import TracerProvider

    from rollgym.telemetry.setup import install_for_tests

    install_for_tests(InMemorySpanExporter(), groups=[])
    configure_gate([], tracing_active=True)
    assert gate.tracing and not gate.http
    tracer = TracerProvider().get_tracer("test")
    async with serving(echo()) as url:
        with tracer.start_as_current_span("caller") as caller:
            response = await client.post_json("echo", url + "/current", {})
    assert response.data["trace_id"] == format(caller.get_span_context().trace_id, "032x")
