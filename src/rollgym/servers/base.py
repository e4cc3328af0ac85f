"""What every rollgym server has in common: its context, its options, its lifecycle, its routes.

A server class declares ``kind`` (agent | environment | model) and ``Options`` (a frozen
pydantic model, validated once by the config loader and again in the server process), adds
its routes in :meth:`Server.add_routes`, and gets one :class:`ServerContext` holding who it
is, where the other servers are, and the process's one :class:`~rollgym.http.client.HttpClient`.
:func:`rollgym.http.server.create_app` turns it into an ASGI app.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fastapi import FastAPI

from rollgym.defaults import MAX_REQUEST_BYTES
from rollgym.http.client import HttpClient
from rollgym.http.server import error_body
from rollgym.server_options import ServerKind, ServerOptions


@dataclass
class ServerContext:
    """Everything a server knows about its place in the run; built once at process start."""

    name: str
    options: ServerOptions
    #: Base URLs of the other servers of the run, by server name.
    urls: Mapping[str, str] = field(default_factory=dict)
    run_id: str = ""
    max_request_bytes: int = MAX_REQUEST_BYTES
    #: The one outgoing client of the process; started by :meth:`Server.start`.
    client: HttpClient = field(default_factory=HttpClient)

    def url_of(self, server_name: str) -> str:
        """Base URL of another server; a clear error when the run did not give it."""
        try:
            return self.urls[server_name].rstrip("/")
        except KeyError:
            raise LookupError(
                f"server {self.name!r} needs the URL of {server_name!r}, which the run did not "
                f"provide (known: {sorted(self.urls)})"
            ) from None


class Server:
    """Base of every server implementation.

    Subclasses set ``kind`` and ``Options`` and override :meth:`add_routes`; they may override
    :meth:`on_startup` / :meth:`on_shutdown` for their own long-lived resources (created
    there, outside any request, so no rollout's context is captured). A subclass with its own
    ``Options`` declares ``options`` as that class beside it (``options: MyOptions``), so
    ``self.options`` is typed as it; ``__init__`` checks the instance is one.
    """

    kind: ClassVar[ServerKind]
    Options: ClassVar[type[ServerOptions]] = ServerOptions
    options: ServerOptions

    def __init__(self, context: ServerContext) -> None:
        expected = type(self).Options
        if not isinstance(context.options, expected):
            raise TypeError(
                f"server {context.name!r} ({type(self).__name__}) was given options of class "
                f"{type(context.options).__name__}, not {expected.__name__} (its Options)"
            )
        self.context = context
        self.options = context.options

    @classmethod
    def build(
        cls,
        name: str,
        options: Mapping[str, Any] | ServerOptions | None = None,
        **context: Any,
    ) -> Server:
        """Validate ``options`` against ``Options`` and construct the server."""
        if not isinstance(options, ServerOptions):
            options = cls.Options.model_validate(dict(options or {}))
        return cls(ServerContext(name=name, options=options, **context))

    @property
    def client(self) -> HttpClient:
        return self.context.client

    async def start(self) -> None:
        """Open the HttpClient, then the subclass's resources. Called by the app's lifespan."""
        await self.context.client.start()
        await self.on_startup()
        if self.kind != "model":
            from rollgym.servers.sdk_warmup import warm_up_if_used

            await warm_up_if_used(type(self))

    async def stop(self) -> None:
        try:
            await self.on_shutdown()
        finally:
            await self.context.client.close()
            # The SDK's shared pool exists only where it was imported (an SDK agent): anywhere
            # else importing it now would import aiohttp at shutdown for nothing.
            sdk_pool = sys.modules.get("rollgym.servers.sdk_pool")
            if sdk_pool is not None:
                await sdk_pool.aclose_async_pool()

    async def on_startup(self) -> None:
        """Hook: create long-lived resources (background tasks, upstream keys)."""

    async def on_shutdown(self) -> None:
        """Hook: release what :meth:`on_startup` created."""

    def add_routes(self, app: FastAPI) -> None:
        """Hook: add this server's routes (``app.post(...)(handler)``)."""

    def error_body(self, status: int, message: str, field: str | None) -> dict[str, Any]:
        """Hook: the JSON body of an error answer (model servers speak OpenAI's shape)."""
        return error_body(message, field)
