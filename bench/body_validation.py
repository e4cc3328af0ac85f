"""A JSON body validated by a FastAPI body parameter vs ``model_validate_json`` on the raw bytes.

One FastAPI app (rollgym's ``create_app`` middleware is not involved: only the route differs)
with two routes taking the same pydantic model, the environment's ``SeedRequest`` and the
model server's ``ChatRequest``: one declares it as a body parameter (FastAPI: stdlib ``json``,
then validation through the dependency solver), the other reads ``Request`` and calls
``rollgym.http.model_body.model_body``, a third is a plain Starlette route doing the same
(no FastAPI dependency solving). Requests are driven through the ASGI interface in this
process (no sockets), rounds alternating, and the CPU per request of each is printed with the
ratio.

    python bench/body_validation.py [-n 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from rollgym import event_loop
from rollgym.http.model_body import model_body
from rollgym.servers.environment import SeedRequest
from rollgym.servers.model import ChatRequest

SEED = orjson.dumps({"rollout_id": "3-0", "task": {"a": 12, "b": 30, "op": "add"}})
CHAT = orjson.dumps(
    {
        "model": "policy",
        "messages": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "What is 12 + 30?"},
        ],
        "temperature": 0.7,
        "max_tokens": 64,
    }
)


def build_app() -> FastAPI:
    app = FastAPI()

    @app.post("/param/seed")
    async def param_seed(body: SeedRequest) -> Response:
        return Response(b"{}")

    @app.post("/param/chat")
    async def param_chat(body: ChatRequest, request: Request) -> Response:
        return Response(b"{}")

    @app.post("/raw/seed")
    async def raw_seed(request: Request) -> Response:
        await model_body(request, SeedRequest)
        return Response(b"{}")

    @app.post("/raw/chat")
    async def raw_chat(request: Request) -> Response:
        await model_body(request, ChatRequest)
        return Response(b"{}")

    async def route_seed(request: Request) -> Response:
        await model_body(request, SeedRequest)
        return Response(b"{}")

    async def route_chat(request: Request) -> Response:
        await model_body(request, ChatRequest)
        return Response(b"{}")

    # Starlette routes: the endpoint is called with the request, no dependency solving
    app.router.add_route("/route/seed", route_seed, methods=["POST"])
    app.router.add_route("/route/chat", route_chat, methods=["POST"])
    return app


async def _requests(app: FastAPI, path: str, body: bytes, n: int) -> float:
    """CPU seconds per request of ``n`` requests to ``path``."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.process_time()
    for _ in range(n):
        await app(dict(scope), receive, send)
    spent = time.process_time() - start
    if set(statuses) != {200}:
        raise SystemExit(f"{path} answered {sorted(set(statuses))}")
    return spent / n


async def main_async(n: int, rounds: int) -> None:
    app = build_app()
    for kind, body in (("seed", SEED), ("chat", CHAT)):
        ways = ["param", "raw", "route"]
        per: dict[str, list[float]] = {way: [] for way in ways}
        for way in ways:
            await _requests(app, f"/{way}/{kind}", body, 500)  # warm each
        for i in range(rounds):
            for way in ways if i % 2 == 0 else list(reversed(ways)):
                per[way].append(await _requests(app, f"/{way}/{kind}", body, n))
        param, raw, route = (statistics.median(per[way]) for way in ways)
        print(
            f"{kind}: FastAPI body parameter {param * 1e6:.1f} us, model_validate_json in a "
            f"FastAPI route {raw * 1e6:.1f} us ({param / raw:.2f}x), in a Starlette route "
            f"{route * 1e6:.1f} us ({param / route:.2f}x) per request"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    event_loop.run(main_async(args.n, args.rounds))


if __name__ == "__main__":
    main()
