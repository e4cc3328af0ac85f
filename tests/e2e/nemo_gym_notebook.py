"""A NeMo Gym resource server written from scratch with nemo-gym's own base classes (nothing
of rollgym in it), run by nemo-gym's interpreter: ``python nemo_gym_notebook.py`` with the
config NeMo Gym's launcher injects, as rollgym's ``resources_server:`` or the tests start it.

Each session (the session cookie) is seeded with a row's ``secret``; the tool ``note`` keeps a
line, the tool ``reveal`` tells the secret; ``/verify`` rewards a final answer that says the
secret (read from NeMo Gym's ``response`` body). ``GET /test/sessions`` counts sessions seeded,
closed and verified, and every change is also written to ``NOTEBOOK_COUNTS`` (a file) when set,
so the tests count them from outside, even after the server died. ``NOTEBOOK_MODE`` makes it
misbehave: ``seed_fails`` (seeding raises), ``verify_off`` (verify answers no reward),
``tool_hangs`` (a tool never answers), ``no_start`` (it exits before serving); ``slow_seed``
answers a seed two seconds after it made the session (a client shut down meanwhile).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import BaseModel, Field

MODE = os.environ.get("NOTEBOOK_MODE", "ok")
COUNTS = os.environ.get("NOTEBOOK_COUNTS")


class NotebookConfig(BaseResourcesServerConfig):
    pass


class NotebookSeedRequest(BaseSeedSessionRequest):
    secret: str


class NoteRequest(BaseModel):
    text: str


class NotebookVerifyRequest(BaseVerifyRequest):
    secret: str


class NotebookResourcesServer(SimpleResourcesServer):
    config: NotebookConfig
    secrets: dict[str, str] = Field(default_factory=dict)
    notes: dict[str, list[str]] = Field(default_factory=dict)
    counts: dict[str, int] = Field(
        default_factory=lambda: {"seeded": 0, "closed": 0, "verified": 0}
    )

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/note")(self.note)
        app.post("/reveal")(self.reveal)
        app.get("/test/sessions")(self.sessions)
        return app

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        if COUNTS:
            with open(COUNTS + ".tmp", "w") as out:
                json.dump({**self.counts, "open": len(self.secrets), "pid": os.getpid()}, out)
            os.replace(COUNTS + ".tmp", COUNTS)

    async def seed_session(
        self, request: Request, body: NotebookSeedRequest
    ) -> BaseSeedSessionResponse:
        if MODE == "seed_fails":
            raise RuntimeError("the notebook is locked")
        self.secrets[request.session[SESSION_ID_KEY]] = body.secret
        self._count("seeded")
        if MODE == "slow_seed":
            await asyncio.sleep(2)
        return BaseSeedSessionResponse()

    async def close_resources_session(
        self, request: Request, body: ResourcesCloseSessionRequest
    ) -> ResourcesCloseSessionResponse:
        session_id = request.session[SESSION_ID_KEY]
        if self.secrets.pop(session_id, None) is not None:
            self.notes.pop(session_id, None)
            self._count("closed")
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def note(self, request: Request, body: NoteRequest) -> dict[str, int]:
        lines = self.notes.setdefault(request.session[SESSION_ID_KEY], [])
        lines.append(body.text)
        return {"lines": len(lines)}

    async def reveal(self, request: Request) -> dict[str, str]:
        if MODE == "tool_hangs":
            await asyncio.sleep(3600)
        return {"secret": self.secrets.get(request.session[SESSION_ID_KEY], "(no session)")}

    async def sessions(self) -> dict[str, int]:
        return {**self.counts, "open": len(self.secrets)}

    async def verify(self, request: Request, body: NotebookVerifyRequest) -> BaseVerifyResponse:
        if MODE == "verify_off":
            return JSONResponse({"score": "high"})  # type: ignore[return-value]
        said = " ".join(
            part.text
            for item in body.response.output
            if item.type == "message"
            for part in item.content
            if part.type == "output_text"
        )
        self._count("verified")
        return BaseVerifyResponse(**body.model_dump(), reward=float(body.secret in said))


if __name__ == "__main__":
    if MODE == "no_start":
        print("the notebook has no pages", file=sys.stderr)
        sys.exit(3)
    NotebookResourcesServer.run_webserver()
