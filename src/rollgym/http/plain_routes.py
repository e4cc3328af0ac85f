"""Hot routes as plain Starlette routes: the endpoint gets the request, nothing is solved.

A FastAPI route runs its dependency solver on every request, even for an endpoint whose only
parameter is the ``Request``; a Starlette ``Route`` calls the endpoint directly, about 75 µs
less CPU a request on the development machine (``bench/body_validation.py``). The app's
exception handlers (the 400s of ``model_body``, ``HTTPError``) apply to both alike. The one
thing a FastAPI route did that rollgym reads is set ``scope["route"]``, from which the
telemetry middleware names a server span by its template (``/tools/{name}``, never the
high-cardinality path); :class:`TemplatedRoute` sets it the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

Endpoint = Callable[[Request], Awaitable[Response]]


class TemplatedRoute(Route):
    """A Starlette route that records itself as ``scope["route"]``, as FastAPI's routes do."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def add_post(app: FastAPI, path: str, endpoint: Endpoint) -> None:
    """Serve POST ``path`` with ``endpoint(request)``; path parameters are in
    ``request.path_params``."""
    app.router.routes.append(TemplatedRoute(path, endpoint, methods=["POST"]))
