"""The model server base: OpenAI-compatible chat completions, attributed to their rollout.

Two routes reach the same ``complete``: the plain ``/v1/chat/completions`` (the rollout id is
the prefix of ``X-Request-Id: <rollout id>.<turn>``) and the rollout-scoped
``/r/<rollout id>/v1/chat/completions``, so an unmodified agent that forwards no headers is
still attributed to its rollout. The Responses API (``/v1/responses`` and
``/r/<rollout id>/v1/responses``) is translated to the same ``complete`` by :meth:`respond`,
with the same attribution. Subclasses implement only :meth:`ModelServer.complete`; one whose
upstream speaks the Responses API natively may override :meth:`ModelServer.respond`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from fastapi import Body, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from rollgym.config import ServerKind
from rollgym.http.server import HTTPError, OrjsonResponse
from rollgym.servers import responses_api
from rollgym.servers.base import Server
from rollgym.telemetry import names


class ChatRequest(BaseModel):
    """An OpenAI chat completion request; fields we do not use are kept and forwarded."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    stream: bool = False


def rollout_of_request_id(request_id: str | None) -> str | None:
    """``"3-0.2"`` -> ``"3-0"``; None unless the id has the ``<rollout id>.<turn>`` shape."""
    if not request_id:
        return None
    prefix, dot, turn = request_id.rpartition(".")
    return prefix if dot and prefix and turn.isdigit() else None


class ModelServer(Server):
    """Base of every model server; subclasses implement :meth:`complete`."""

    kind: ClassVar[ServerKind] = "model"

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """Answer one chat completion (an OpenAI ``chat.completion`` object)."""
        raise NotImplementedError

    async def respond(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        """Answer one Responses API request (a ``response`` object) through :meth:`complete`.

        Validation errors are a 400 naming the field (``body.input.1.call_id``).
        """
        request = responses_api.parse_request(body)
        chat = ChatRequest.model_validate(responses_api.to_chat_request(request))
        answer = await self.complete(chat, request_id, rollout_id)
        return responses_api.to_response(answer, request, request_id)

    def add_routes(self, app: FastAPI) -> None:
        app.post("/v1/chat/completions")(self._chat)
        app.post("/r/{rollout_id:path}/v1/chat/completions")(self._scoped_chat)
        app.post("/v1/responses")(self._responses)
        app.post("/r/{rollout_id:path}/v1/responses")(self._scoped_responses)

    async def _chat(self, body: ChatRequest, request: Request) -> Response:
        request_id = request.headers.get(names.HEADER_REQUEST_ID)
        return await self._answer(body, request_id, rollout_of_request_id(request_id))

    async def _scoped_chat(self, rollout_id: str, body: ChatRequest, request: Request) -> Response:
        return await self._answer(body, request.headers.get(names.HEADER_REQUEST_ID), rollout_id)

    async def _answer(
        self, body: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> Response:
        if body.stream:
            raise _streaming_refused()
        return OrjsonResponse(await self.complete(body, request_id, rollout_id))

    async def _responses(
        self, body: Annotated[dict[str, Any], Body()], request: Request
    ) -> Response:
        request_id = request.headers.get(names.HEADER_REQUEST_ID)
        return await self._answer_responses(body, request_id, rollout_of_request_id(request_id))

    async def _scoped_responses(
        self, rollout_id: str, body: Annotated[dict[str, Any], Body()], request: Request
    ) -> Response:
        request_id = request.headers.get(names.HEADER_REQUEST_ID)
        return await self._answer_responses(body, request_id, rollout_id)

    async def _answer_responses(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> Response:
        # Checked here, before any override of respond: no model server streams.
        if body.get("stream") not in (None, False):
            raise _streaming_refused()
        return OrjsonResponse(await self.respond(body, request_id, rollout_id))


def _streaming_refused() -> HTTPError:
    """The one answer to ``stream: true`` on either API: no model server streams."""
    return HTTPError(400, "streaming is not supported; send stream: false", field="body.stream")
