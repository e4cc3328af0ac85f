"""The one ASGI app factory of every rollgym server process.

Every server (agent, environment, model) is a FastAPI app built here, so they all share the
same edge: the request-size limit (413 naming the limit), the 400 shape of a validation error
(``{"error", "field"}``), orjson bodies, ``GET /health``, and the telemetry middleware that
joins each request to the caller's trace. The middleware is pure ASGI (not
``BaseHTTPMiddleware``): it adds one branch per request when telemetry is off.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollgym.errors import HTTPError
from rollgym.http import hot_routes
from rollgym.http.scoped_context import traceparent_in_path
from rollgym.telemetry import names
from rollgym.telemetry.groups import gate

#: Every server's liveness route; the telemetry middleware opens no span for it.
HEALTH_PATH = "/health"


class OrjsonResponse(Response):
    """A JSON response serialized by orjson: faster than the stdlib, and NaN-safe (null).
    NumPy values (``float32`` scalars, arrays) are written as the numbers and lists they hold,
    since an agent's or environment's result is often computed with NumPy."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, option=_OPTIONS)
        except orjson.JSONEncodeError as exc:
            raise HTTPError(500, f"the answer {unwritable_part(content, exc)}") from None


_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def unwritable_part(content: Any, exc: Exception) -> str:
    """Where in ``content`` the value JSON cannot hold is, and what it is: ``holds a set at
    info.steps[1] that JSON cannot hold (Type is not JSON serializable: set)``. Walked only
    after orjson refused ``content`` (``exc``), so a writable answer pays nothing for it."""
    path, value = _first_unwritable(content, "")
    path = path.lstrip(".")
    if len(path) > _PATH_MOST:  # nested past orjson's depth limit: its start says enough
        path = path[:_PATH_MOST] + "..."
    where = f" at {path}" if path else ""
    kind = type(value).__name__
    article = "an" if kind[0] in "aeiou" else "a"
    return f"holds {article} {kind}{where} that JSON cannot hold ({exc})"


#: Most characters of the path an error names.
_PATH_MOST = 200
#: Deepest the walk goes: past orjson's own limit (254 levels), so it finds what orjson refused.
_DEPTH_MOST = 300


def _first_unwritable(value: Any, path: str) -> tuple[str, Any]:
    """The path and value of the innermost part of ``value`` JSON cannot hold, going down the
    first such part at each level (iteratively: a nesting deeper than Python's recursion
    limit is an answer this must still describe)."""
    for _ in range(_DEPTH_MOST):
        found: tuple[str, Any] | None = None
        if isinstance(value, dict):
            for key, item in value.items():
                if not _writable({key: None}):
                    return f"{path}.{key!r}", key
                if not _writable(item):
                    found = (f"{path}.{key}", item)
                    break
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                if not _writable(item):
                    found = (f"{path}[{index}]", item)
                    break
        if found is None:
            return path, value
        path, value = found
    return path, value


def _writable(value: Any) -> bool:
    try:
        orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return False
    return True


def error_body(message: str, field: str | None = None) -> dict[str, Any]:
    """The JSON error shape of every rollgym server."""
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return body


#: Builds an error body from (status, message, field): the server's own shape.
ErrorShape = Callable[[int, str, "str | None"], dict[str, Any]]


class HostedContext(Protocol):
    """What the app factory reads of a server's context: its name and its body limit."""

    @property
    def name(self) -> str: ...

    @property
    def max_request_bytes(self) -> int: ...


class HostedServer(Protocol):
    """The shape :func:`create_app` needs of a server (``rollgym.servers.base.Server`` has
    it): written here, in the lower layer, so ``http/`` never imports ``servers/``."""

    @property
    def kind(self) -> str: ...

    @property
    def context(self) -> HostedContext: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def add_routes(self, app: FastAPI) -> None: ...

    def error_body(self, status: int, message: str, field: str | None) -> dict[str, Any]: ...


# --- middleware -------------------------------------------------------------------------------


class BodyLimitMiddleware:
    """Refuse request bodies over ``limit`` bytes with a 413 that names the size and the limit.

    A declared ``Content-Length`` is checked before the app runs (the HTTP server enforces
    framing, so the body cannot exceed it). A body without one (chunked) is read and counted
    here first, then replayed to the app, so the app never sees a partial body.
    """

    def __init__(self, app: ASGIApp, limit: int, shape: ErrorShape | None = None) -> None:
        self.app = app
        self.limit = limit
        self.shape = shape or (lambda status, message, field: error_body(message, field))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.limit:
                await self._refuse(send, f"{declared} bytes")
                return
            await self.app(scope, receive, send)
            return
        if scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send, f"more than {self.limit} bytes")
                return
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send: Send, size: str) -> None:
        body = self.shape(
            413,
            f"request body is too large: {size}; the limit is {self.limit} bytes "
            "(run.max_request_bytes)",
            "body",
        )
        await OrjsonResponse(body, status_code=413)({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class TelemetryMiddleware:
    """Join every request to the caller's trace; open the HTTP server span when ``http`` is on.

    With ``gate.http`` the span helper extracts the W3C context and makes the server span
    current; after the app ran, the span gets the route template (never the raw path, so
    rollout-scoped URLs stay low-cardinality) and the status. With only ``gate.tracing`` the
    extracted context is attached for the request, so spans opened inside still join the
    caller's trace. With neither, one attribute load and a branch.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            # Health polls (the launcher's, a balancer's) are no one's work: no trace.
            await self.app(scope, receive, send)
        elif gate.http:
            await self._with_span(scope, receive, send)
        elif gate.tracing:
            await self._with_context(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _with_span(self, scope: Scope, receive: Receive, send: Send) -> None:
        from rollgym.telemetry import spans

        status = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        method = scope["method"]
        scheme = scope.get("scheme", "http")
        with spans.http_server_span(method, scope["path"], _headers(scope), scheme) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = _route_template(scope)
                if route is not None:
                    span.set_attribute(names.HTTP_ROUTE, route)
                    span.update_name(f"{method} {route}")
                span.set_attribute(names.HTTP_RESPONSE_STATUS_CODE, status[0])
                if status[0] >= 500:
                    span.set_attribute(names.ERROR_TYPE, str(status[0]))

    async def _with_context(self, scope: Scope, receive: Receive, send: Send) -> None:
        from opentelemetry import context as otel_context

        from rollgym.telemetry.context import extract_context

        token = otel_context.attach(extract_context(_headers(scope)))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers as the propagator's carrier; a rollout-scoped path's
    ``traceparent`` segment stands in for a missing header (:mod:`.scoped_context`)."""
    headers = _asgi_carrier()(scope["headers"])
    if "traceparent" not in headers:
        carried = traceparent_in_path(scope["path"])
        if carried is not None:
            headers["traceparent"] = carried
    return headers


@functools.cache
def _asgi_carrier() -> Callable[[Iterable[tuple[bytes, bytes]]], dict[str, str]]:
    """``telemetry.context.asgi_carrier``, imported on the first traced request and never with
    tracing off; cached, so a traced request pays no import statement for it."""
    from rollgym.telemetry.context import asgi_carrier

    return asgi_carrier


def _route_template(scope: Scope) -> str | None:
    route = scope.get("route")
    if route is None:
        return None
    return getattr(route, "path_format", None) or getattr(route, "path", None)


# --- handlers ---------------------------------------------------------------------------------


def _error_handlers(
    shape: ErrorShape,
) -> Mapping[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """The exception handlers of one app, all answering in the server's error shape."""

    def answer(status: int, message: str, field: str | None = None) -> Response:
        return OrjsonResponse(shape(status, message, field), status_code=status)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        field = ".".join(str(part) for part in first.get("loc", ()))
        message = f"{field}: {first.get('msg', 'invalid')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return answer(400, message, field)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPError)
        if exc.detail:  # the shape's keys win over the detail's
            body = {**exc.detail, **shape(exc.status, exc.message, exc.field)}
            return OrjsonResponse(body, status_code=exc.status)
        return answer(exc.status, exc.message, exc.field)

    async def unexpected_error(request: Request, exc: Exception) -> Response:
        return answer(500, f"internal error: {type(exc).__name__}: {exc}")

    async def starlette_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return answer(exc.status_code, str(exc.detail))

    return {
        RequestValidationError: validation_error,
        HTTPError: http_error,
        StarletteHTTPException: starlette_http_error,
        Exception: unexpected_error,
    }


def _native_telemetry_off() -> dict[str, Any]:
    """Recent FastAPI opens its own server spans and metrics when a provider is set; ours are
    the contract (TELEMETRY.md names, gates, route templates), so switch FastAPI's off, and
    pass nothing to a FastAPI too old to know the option."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    off = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}
    return {"telemetry": off}


_NATIVE_TELEMETRY_OFF = _native_telemetry_off()


def create_app(server: HostedServer) -> FastAPI:
    """Build the ASGI app of one server: its routes plus the shared edge described above.

    The server's ``start``/``stop`` run in the app's lifespan, so its one HttpClient and any
    background task are created outside every request (and so outside every span).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = FastAPI(
        title=f"rollgym {server.kind} {server.context.name}",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=OrjsonResponse,
        **_NATIVE_TELEMETRY_OFF,
    )
    for exc_type, handler in _error_handlers(server.error_body).items():
        app.add_exception_handler(exc_type, handler)

    health = {"status": "ok", "name": server.context.name, "kind": server.kind}

    @app.get(HEALTH_PATH)
    async def _health() -> Response:
        return OrjsonResponse(health)

    server.add_routes(app)
    if hot_routes.enabled():
        # The plain routes' POSTs skip Starlette's routing. Appended, not added: the innermost
        # layer, inside any middleware the server's add_routes installed, so that still runs.
        app.user_middleware.append(
            Middleware(
                hot_routes.HotRoutes,
                routes=app.router.routes,
                handlers=app.exception_handlers,
                router=app.router,
            )
        )
    # Added last = outermost: the span covers a refused (413) request too.
    app.add_middleware(
        BodyLimitMiddleware, limit=server.context.max_request_bytes, shape=server.error_body
    )
    app.add_middleware(TelemetryMiddleware)
    return app
