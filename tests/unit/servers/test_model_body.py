"""Bodies read with ``model_body`` (in plain routes too) answer as FastAPI body parameters did.

A real server on loopback with the same model behind both readers; every bad body gets the same
status and the same dotted field from both, so the switch on the hot routes changes no answer.
"""

from __future__ import annotations

import aiohttp
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from rollgym.http.model_body import model_body
from rollgym.http.plain_routes import add_post
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    count: int = Field(ge=1)
    tags: list[str] = Field(default_factory=list)


class OrderServer(Server):
    kind = "environment"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/param")
        async def param(order: Order) -> OrjsonResponse:
            return OrjsonResponse(order.model_dump())

        @app.post("/raw")
        async def raw(request: Request) -> OrjsonResponse:
            return OrjsonResponse((await model_body(request, Order)).model_dump())


BODIES = {
    "good": b'{"name": "x", "count": 2, "tags": ["a"]}',
    "wrong type": b'{"name": "x", "count": "many"}',
    "too small": b'{"name": "x", "count": 0}',
    "missing": b'{"count": 2}',
    "extra key": b'{"name": "x", "count": 2, "colour": "red"}',
    "nested": b'{"name": "x", "count": 2, "tags": ["a", 3]}',
    "not an object": b"[1, 2]",
}


async def _post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"content-type": "application/json"}) as response,
    ):
        return response.status, await response.json()


@pytest.mark.parametrize("case", list(BODIES))
async def test_model_body_answers_as_the_body_parameter_did(serving, case: str) -> None:
    server = OrderServer.build("orders", {})
    async with serving(server) as url:
        param = await _post(url + "/param", BODIES[case])
        raw = await _post(url + "/raw", BODIES[case])
    assert raw[0] == param[0]
    if case == "good":
        assert raw == param == (200, {"name": "x", "count": 2, "tags": ["a"]})
    else:
        assert raw[0] == 400
        assert raw[1]["field"] == param[1]["field"]


async def test_invalid_json_is_a_400_naming_the_body(serving) -> None:
    async with serving(OrderServer.build("orders", {})) as url:
        status, answer = await _post(url + "/raw", b'{"name": ')
    assert status == 400
    assert str(answer["field"]).startswith("body")


class ToolServer(Server):
    kind = "environment"

    def add_routes(self, app: FastAPI) -> None:
        async def tool(request: Request) -> OrjsonResponse:
            order = await model_body(request, Order)
            return OrjsonResponse({"tool": request.path_params["name"], "count": order.count})

        add_post(app, "/tools/{name}", tool)


async def test_a_plain_route_names_its_span_by_the_template(serving, client) -> None:
    """A Starlette route answers like a FastAPI one and its server span keeps the template."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rollgym.telemetry import names
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(ToolServer.build("tools", {})) as url:
        ok = await client.post_json("tools", url + "/tools/add", {"name": "x", "count": 3})
        bad = await client.post_json("tools", url + "/tools/add", {"name": "x", "count": 0})
        wrong_method = await client.get_json("tools", url + "/tools/add")
    assert (ok.status, ok.data) == (200, {"tool": "add", "count": 3})
    assert (bad.status, bad.data["field"]) == (400, "body.count")
    assert wrong_method.status == 405
    server = [s for s in exporter.get_finished_spans() if s.kind == trace.SpanKind.SERVER]
    assert server and {s.name for s in server} >= {"POST /tools/{name}"}
    assert server[0].attributes[names.HTTP_ROUTE] == "/tools/{name}"
