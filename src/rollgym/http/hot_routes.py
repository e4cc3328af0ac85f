"""The rollout's hot routes dispatched straight to their endpoints; Starlette routes the rest.

Every request to a rollgym server used to pass, after rollgym's own middleware, through
Starlette's ``ExceptionMiddleware``, FastAPI's per-request ``AsyncExitStack``, the router's
scan of every route (a regex match each) and the route's ``request_response`` wrappers
(two nested closures and a second exception wrapper) before the endpoint ran. For the plain
routes of :mod:`rollgym.http.plain_routes` (``/run``, ``/seed_session``, ``/tools/{name}``,
``/verify``, ``/v1/chat/completions`` and its rollout-scoped form) none of that does
anything the endpoint needs: :class:`HotRoutes`, the innermost middleware, looks the
``(POST, path)`` up in a table built once from the app's routes and calls the endpoint
itself (``bench/hot_routes.py`` measures the server's CPU per request both ways).

What does not change: the middleware outside it (telemetry, the body limit, FastAPI's and
Starlette's outer layers) runs as before; ``scope["route"]`` is set, so the server span is
still named by the template; an exception the endpoint raises is answered by the app's own
handler for it (the same lookup Starlette makes: status handlers, then the exception's
classes in order), and one without a handler propagates to the outer layers as before. A
request for any other method or path, or one Starlette would route elsewhere (an earlier
route that also matches, a mount), goes to the app unchanged: the table is built in route
order and gives up on what it cannot decide. ``ROLLGYM_HOT_ROUTES=starlette`` in the
environment leaves every request to Starlette (for comparing the two side by side).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from rollgym.environment_variables import ROLLGYM_HOT_ROUTES
from rollgym.http.plain_routes import TemplatedRoute

ENV_HOT_ROUTES = ROLLGYM_HOT_ROUTES


def enabled() -> bool:
    """Whether servers dispatch their hot routes directly (the default)."""
    return os.environ.get(ENV_HOT_ROUTES, "") != "starlette"


class RouteTable:
    """Which POST paths go straight to a plain route's endpoint, decided once in route order.

    Starlette serves a request with the first route that fully matches it, so a path is
    taken here only when that first route is a plain one: a static path by a dict lookup
    (``passthrough`` holds those another route wins), a path with parameters by the plain
    templated routes in order, and none at all after a mount or any route this cannot read.
    """

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self.exact: dict[str, TemplatedRoute] = {}
        self.patterned: list[TemplatedRoute] = []
        self.passthrough: set[str] = set()
        earlier: list[Route] = []  # routes with parameters that take a POST, in order
        patterned_open = True
        for route in routes:
            if isinstance(route, WebSocketRoute):
                continue
            if not isinstance(route, Route):
                break  # a mount or a host route: what follows is Starlette's to decide
            if route.methods is not None and "POST" not in route.methods:
                continue  # never the route of a POST (a 405 only if nothing else matches)
            hot = _plain(route)
            if route.param_convertors:
                if hot is not None and patterned_open:
                    self.patterned.append(hot)
                elif hot is None:
                    patterned_open = False  # a later templated path may be this one's
                earlier.append(route)
                continue
            path = route.path
            if path in self.exact or path in self.passthrough:
                continue  # an earlier route of the same path wins
            first = next((r for r in earlier if r.path_regex.match(path)), None)
            if first is None and hot is not None:
                self.exact[path] = hot
            elif first is None or first not in self.patterned:
                self.passthrough.add(path)
            # else: the earlier plain templated route takes it, through ``patterned``

    def lookup(self, path: str) -> tuple[TemplatedRoute, dict[str, Any]] | None:
        """The plain route a POST to ``path`` is for, and its path parameters; None: not hot."""
        route = self.exact.get(path)
        if route is not None:
            return route, {}
        if path in self.passthrough:
            return None
        for route in self.patterned:
            match = route.path_regex.match(path)
            if match is not None:
                params: dict[str, Any] = match.groupdict()
                for key, value in params.items():
                    params[key] = route.param_convertors[key].convert(value)
                return route, params
        return None


def _plain(route: Route) -> TemplatedRoute | None:
    """``route`` when it is a plain route with an async endpoint (Starlette runs a sync one in a
    thread, which the direct path does not), else None."""
    if isinstance(route, TemplatedRoute) and inspect.iscoroutinefunction(route.endpoint):
        return route
    return None


Handler = Any  # Starlette's ExceptionHandler: (request, exc) -> Response, sync or async


class HotRoutes:
    """The innermost middleware of every rollgym app: hot POSTs to their endpoint, the rest on.

    ``routes`` and ``handlers`` are the app's own (``app.router.routes``,
    ``app.exception_handlers``), read when Starlette builds the middleware stack (on the
    first request), so every route and handler the server added is in the table.
    """

    def __init__(
        self,
        app: ASGIApp,
        routes: Iterable[BaseRoute],
        handlers: Mapping[Any, Handler],
        router: object = None,
    ) -> None:
        self.app = app
        self.router = router
        # As Starlette's ExceptionMiddleware takes them: 500 / Exception are the outermost
        # layer's (ServerErrorMiddleware), status codes are looked up before classes.
        self.by_status = {k: v for k, v in handlers.items() if isinstance(k, int) and k != 500}
        self.by_class = {
            k: v for k, v in handlers.items() if isinstance(k, type) and k is not Exception
        }
        # Without the app's own HTTPException handler, Starlette's default one would answer
        # it: leave every request to Starlette rather than answer differently.
        self.table = RouteTable(routes if HTTPException in self.by_class else ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            found = self.table.lookup(scope["path"])
            if found is not None:
                await self._serve(found[0], found[1], scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(
        self,
        route: TemplatedRoute,
        params: dict[str, Any],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        # What the router and the route would have put in the scope.
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        if "router" not in scope:
            scope["router"] = self.router
        request = Request(scope, receive, send)
        try:
            response: Response = await route.endpoint(request)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            answered = handler(request, exc)
            response = await answered if inspect.isawaitable(answered) else answered
            exc.__traceback__ = None  # as Starlette: a reused exception keeps no tracebacks
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Handler | None:
        if isinstance(exc, HTTPException):
            handler = self.by_status.get(exc.status_code)
            if handler is not None:
                return handler
        for cls in type(exc).__mro__:
            handler = self.by_class.get(cls)
            if handler is not None:
                return handler
        return None
