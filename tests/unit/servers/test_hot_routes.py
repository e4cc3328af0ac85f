"""The hot routes dispatched straight to their endpoints answer exactly as Starlette's router did.

Real servers on loopback built by ``create_app``, once as shipped and once with
``ROLLGYM_HOT_ROUTES=starlette``: every request of a set that covers the answers a route can
give (good, 400, the app's own error, an unexpected exception, 405, 413, 404, a path an
earlier FastAPI route takes) gets the same status and body both ways, and a marker only
Starlette's own exception middleware leaves in the scope shows which way the request went.
The route table's order rules are tested on their own below.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.routing import Mount

from rollgym.errors import HTTPError
from rollgym.http import hot_routes
from rollgym.http.hot_routes import RouteTable
from rollgym.http.model_body import model_body
from rollgym.http.plain_routes import TemplatedRoute, add_post
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server

#: Set in the scope by Starlette's ExceptionMiddleware, which the direct path skips.
STARLETTE_MARK = "starlette.exception_handlers"


class Item(BaseModel):
    count: int


class Shop(Server):
    kind = "environment"

    def add_routes(self, app: FastAPI) -> None:
        @app.middleware("http")  # the server's own middleware: it still sees every request
        async def stamp(request: Request, call_next: Any) -> Any:
            if request.headers.get("x-refuse") == "yes":
                return OrjsonResponse({"error": "refused by the server's middleware"}, 403)
            response = await call_next(request)
            response.headers["x-seen-by"] = "shop"
            return response

        @app.post("/items/special")  # before the templated route: it wins for this path
        async def special() -> OrjsonResponse:
            return OrjsonResponse({"special": True})

        async def item(request: Request) -> OrjsonResponse:
            body = await model_body(request, Item)
            name = request.path_params["name"]
            if name == "missing":
                raise HTTPError(404, f"no item {name!r}", field="name")
            if name == "broken":
                raise RuntimeError("the shelf fell over")
            return OrjsonResponse(
                {
                    "name": name,
                    "count": body.count,
                    "via_starlette": STARLETTE_MARK in request.scope,
                }
            )

        async def order(request: Request) -> OrjsonResponse:
            body = await model_body(request, Item)
            route = request.scope["route"].path
            return OrjsonResponse(
                {
                    "count": body.count,
                    "route": route,
                    "via_starlette": STARLETTE_MARK in request.scope,
                }
            )

        add_post(app, "/items/{name}", item)
        add_post(app, "/order", order)


REQUESTS: list[tuple[str, str, bytes]] = [
    ("POST", "/order", b'{"count": 2}'),
    ("POST", "/order", b'{"count": "many"}'),  # 400 naming body.count
    ("POST", "/order", b'{"count": '),  # invalid JSON: 400
    ("POST", "/items/apple", b'{"count": 1}'),
    ("POST", "/items/missing", b'{"count": 1}'),  # the app's HTTPError handler: 404
    ("POST", "/items/broken", b'{"count": 1}'),  # unexpected: the 500 handler
    ("POST", "/items/special", b"{}"),  # the earlier FastAPI route
    ("GET", "/order", b""),  # 405
    ("POST", "/nowhere", b"{}"),  # 404
    ("POST", "/order", b'{"count": 1, "pad": "' + b"x" * 2000 + b'"}'),  # 413 (the limit: 1000)
    ("POST", "/order?refuse", b'{"count": 1}'),  # the server's middleware answers (403)
]


async def _answers(serving: Any) -> list[tuple[int, object]]:
    got: list[tuple[int, object]] = []
    async with (
        serving(Shop.build("shop", {}, max_request_bytes=1000)) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
    ):
        for method, path, body in REQUESTS:
            headers = {"content-type": "application/json"}
            if path.endswith("?refuse"):
                headers["x-refuse"] = "yes"
            async with session.request(method, url + path, data=body, headers=headers) as answer:
                text = await answer.read()
                try:
                    data: object = orjson.loads(text)
                except orjson.JSONDecodeError:
                    data = text.decode()
                if answer.status == 200:
                    assert answer.headers.get("x-seen-by") == "shop", path
                got.append((answer.status, data))
    return got


async def test_direct_dispatch_answers_every_request_as_starlette_did(
    serving: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = await _answers(serving)
    monkeypatch.setenv(hot_routes.ENV_HOT_ROUTES, "starlette")
    routed = await _answers(serving)
    assert [status for status, _ in direct] == [
        200,
        400,
        400,
        200,
        404,
        500,
        200,
        405,
        404,
        413,
        403,
    ]
    for (status_a, body_a), (status_b, body_b) in zip(direct, routed, strict=True):
        if isinstance(body_a, dict) and "via_starlette" in body_a:
            assert body_a.pop("via_starlette") is False  # it did skip Starlette's stack
            assert isinstance(body_b, dict) and body_b.pop("via_starlette") is True
        assert (status_a, body_a) == (status_b, body_b)
    assert direct[0][1] == {"count": 2, "route": "/order"}
    assert direct[1][1]["field"] == "body.count"  # type: ignore[index]
    assert direct[5][1] == {"error": "internal error: RuntimeError: the shelf fell over"}


async def _ok() -> OrjsonResponse:
    return OrjsonResponse({})


def _post(path: str) -> TemplatedRoute:
    return TemplatedRoute(path, _ok, methods=["POST"])


def test_the_table_takes_a_path_only_where_the_first_matching_route_is_plain() -> None:
    app = FastAPI()
    app.get("/run")(_ok)  # GET only: never a POST's route
    app.router.routes.append(_post("/run"))
    app.post("/tools/list")(_ok)  # static FastAPI route before the templated plain one
    app.router.routes.append(_post("/tools/{name}"))
    app.router.routes.append(_post("/tools/add"))  # after the template: the template wins
    app.post("/r/{rest:path}/v1/responses")(_ok)  # templated FastAPI route: closes the door
    app.router.routes.append(_post("/r/{rest:path}/v1/chat/completions"))
    app.router.routes.append(_post("/late"))
    table = RouteTable(app.router.routes)

    def target(path: str) -> str | None:
        found = table.lookup(path)
        return None if found is None else found[0].path

    assert target("/run") == "/run"
    assert target("/tools/list") is None  # Starlette's: the FastAPI route
    assert target("/tools/add") == "/tools/{name}"
    assert table.lookup("/tools/add") == (table.patterned[0], {"name": "add"})
    assert target("/r/3-0/v1/chat/completions") is None  # after a templated FastAPI route
    assert target("/late") == "/late"  # a static path no earlier route matches
    assert target("/elsewhere") is None


def test_nothing_after_a_mount_and_no_sync_endpoint_is_taken() -> None:
    def sync_endpoint(request: Request) -> OrjsonResponse:
        return OrjsonResponse({})

    routes = [
        TemplatedRoute("/sync", sync_endpoint, methods=["POST"]),
        _post("/before"),
        Mount("/static", app=FastAPI()),
        _post("/after"),
    ]
    table = RouteTable(routes)
    assert table.lookup("/sync") is None  # Starlette runs a sync endpoint in a thread
    assert table.lookup("/before") is not None
    assert table.lookup("/after") is None


def test_the_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hot_routes.ENV_HOT_ROUTES, raising=False)
    assert hot_routes.enabled()
    monkeypatch.setenv(hot_routes.ENV_HOT_ROUTES, "starlette")
    assert not hot_routes.enabled()
