"""A server that looks like ORS from outside (``/health``, ``/list_environments``) and answers
its session off-protocol: the bad-environment tests' misbehaving server. Plain FastAPI."""

from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/list_environments")
def list_environments() -> list[str]:
    return ["guess"]


@app.post("/create_session")
def create_session() -> dict[str, str]:
    return {"hello": "world"}  # JSON, not the event stream that carries the session id
