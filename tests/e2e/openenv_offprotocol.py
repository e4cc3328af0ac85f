"""A server that looks like OpenEnv from outside (``/health``, ``/schema``) and answers its
WebSocket off-protocol: the bad-environment tests' misbehaving server. Plain FastAPI. And
``no_schema_app``, which does not even look like one (no ``/schema``)."""

from __future__ import annotations

from fastapi import FastAPI, WebSocket

app = FastAPI()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "healthy"}


@app.get("/schema")
def schema() -> dict[str, object]:
    action = {"title": "PokeAction", "type": "object", "properties": {"x": {"type": "integer"}}}
    return {"action": action, "observation": {}, "state": {}}


@app.websocket("/ws")
async def ws(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        await websocket.receive_text()
        await websocket.send_text('{"hello": "world"}')


#: An app that is no OpenEnv app at all: it answers ``/health`` and nothing else.
no_schema_app = FastAPI()


@no_schema_app.get("/health")
def no_schema_health() -> dict[str, str]:
    return {"status": "healthy"}
