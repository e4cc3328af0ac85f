"""A model server in front of any OpenAI-compatible upstream (vLLM, OpenAI, a gateway).

Requests go out through the process's one HttpClient, so ``traceparent`` reaches the upstream
and an engine such as vLLM joins the rollout's trace; ``X-Request-Id`` is forwarded so the
engine's own request id names the rollout. The Responses API (``/v1/responses``) is forwarded
as-is to the upstream's ``/v1/responses`` (only ``model`` replaced), not translated: the
upstream speaks it natively; both paths share one forwarding method. The API key is read
from the environment variable that ``api_key_env`` names, at start-up, and never appears in
a log line, an error or a span: upstream error texts are scrubbed of it before they are
passed on.
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar

from pydantic import Field, model_validator

from rollgym.config import ServerOptions
from rollgym.errors import AUTH_STATUSES, AUTHENTICATION, DispatchError
from rollgym.http.server import HTTPError
from rollgym.servers.model import ChatRequest, ModelServer
from rollgym.telemetry import names

_KEY_LIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-*.]{6,}|Bearer\s+\S+)")
_CHAT = "/chat/completions"
_RESPONSES = "/responses"


class OpenAIUpstreamOptions(ServerOptions):
    server_refs: ClassVar[dict[str, Any]] = {"upstream": "model"}

    base_url: str | None = Field(
        None, description="Upstream base URL including /v1, e.g. http://host:8000/v1."
    )
    upstream: str | None = Field(
        None,
        description="Instead of base_url: another model server of the job (e.g. a vLLM given "
        "by url:), reached at <its URL>/v1.",
    )
    model: str = Field(description="The model name sent upstream (replaces the request's).")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    timeout_s: float = Field(600.0, gt=0, description="Time limit of one upstream request.")

    @model_validator(mode="after")
    def _one_upstream(self) -> OpenAIUpstreamOptions:
        if (self.base_url is None) == (self.upstream is None):
            raise ValueError("give exactly one of 'base_url' or 'upstream'")
        return self


class OpenAIUpstream(ModelServer):
    """Forwards chat completions and responses to ``base_url``; answers what the upstream
    answers."""

    Options: ClassVar[type[ServerOptions]] = OpenAIUpstreamOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._key: str | None = None

    @property
    def upstream(self) -> OpenAIUpstreamOptions:
        assert isinstance(self.options, OpenAIUpstreamOptions)
        return self.options

    async def on_startup(self) -> None:
        env_name = self.upstream.api_key_env
        if env_name is not None:
            key = os.environ.get(env_name)
            if not key:
                raise RuntimeError(
                    f"environment variable {env_name!r} (api_key_env) is not set or empty"
                )
            self._key = key

    def scrub(self, text: str) -> str:
        """``text`` without the API key or anything that looks like one."""
        if self._key:
            text = text.replace(self._key, "<redacted>")
        return _KEY_LIKE.sub("<redacted>", text)

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        return await self._forward(_CHAT, request.model_dump(exclude_none=True), request_id)

    async def respond(
        self, body: dict[str, Any], request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        return await self._forward(_RESPONSES, body, request_id)

    async def _forward(
        self, route: str, body: dict[str, Any], request_id: str | None
    ) -> dict[str, Any]:
        """POST ``body`` (its ``model`` replaced) to the upstream's ``route``; its answer."""
        options = self.upstream
        body = {**body, "model": options.model}
        headers = {}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        if request_id:
            headers[names.HEADER_REQUEST_ID] = request_id
        if options.upstream is not None:
            destination = options.upstream
            base = self.context.url_of(options.upstream) + "/v1"
        else:
            destination, base = "upstream", options.base_url or ""
        url = base.rstrip("/") + route
        try:
            response = await self.client.post_json(
                destination,
                url,
                body,
                timeout=options.timeout_s,
                headers=headers,
                route="/v1" + route,
            )
        except DispatchError as exc:
            status = 504 if exc.kind == "timeout" else 502
            raise HTTPError(status, self.scrub(f"upstream model server: {exc}")) from None
        if response.status != 200 or not isinstance(response.data, dict):
            detail = response.data if response.data is not None else response.text
            status = response.status if 400 <= response.status < 600 else 502
            message = self.scrub(f"upstream answered HTTP {response.status}: {detail}")
            if status in AUTH_STATUSES:  # a bad key: permanent, and the driver says which key
                key = options.api_key_env or "no api_key_env is set"
                raise HTTPError(status, f"{message} (API key: {key})", field=AUTHENTICATION)
            raise HTTPError(status, message)
        return response.data
