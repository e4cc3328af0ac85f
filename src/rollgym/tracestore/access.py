"""Who may talk to the trace store: a bearer token whenever it listens beyond loopback.

On 127.0.0.1 only this machine's processes reach the store, so it takes spans from anyone
there, as an OTLP collector would. Listening where other machines reach it (a GPU box whose
vLLM exports its ``llm_request`` spans into the run) it requires ``Authorization: Bearer
<token>`` on every route but ``/health``: the token is generated per run, handed to the
servers the run launches, and printed for the user to give the engine (a token the user sets
in :data:`TOKEN_ENV` is used instead, and then required on loopback too). The token travels in
the environment, never on a command line or in a file.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote

from rollgym.environment_variables import ROLLGYM_TRACE_STORE_TOKEN as TOKEN_ENV

if TYPE_CHECKING:  # the store imports aiohttp; the driver, which reads the token, need not
    from aiohttp import web

__all__ = [
    "TOKEN_ENV",
    "is_loopback",
    "new_token",
    "otel_headers_value",
    "require_token",
    "store_token",
]
_OPEN_PATHS = frozenset({"/health"})


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; False for ``0.0.0.0`` and real hosts."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random token for one run (URL-safe, 256 bits)."""
    return secrets.token_urlsafe(32)


def store_token(host: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The token a store listening on ``host`` requires: the user's ``TOKEN_ENV`` if set,
    else a fresh one beyond loopback, else none."""
    environ = os.environ if environ is None else environ
    given = environ.get(TOKEN_ENV)
    if given:
        return given
    return None if is_loopback(host) else new_token()


def otel_headers_value(token: str) -> str:
    """``token`` as an ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` value (values are URL-encoded)."""
    return "authorization=" + quote(f"Bearer {token}")


def require_token(token: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """aiohttp middleware refusing (401) any request but ``/health`` without the token."""
    from aiohttp import web

    expected = f"Bearer {token}".encode()

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path not in _OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return web.json_response(
                    {"error": "a bearer token is required (Authorization: Bearer <token>)"},
                    status=401,
                )
        return await handler(request)

    return middleware
