"""The one connection pool under every OpenAI SDK client of a process.

``rollout.async_openai()`` is called once per rollout, so what it builds must cost next to
nothing. Measured (``python bench/sdk_agents.py --construction``): an httpx transport costs
tens of milliseconds to build (it loads the system's TLS certificates), on the event loop and
more on a loaded machine, while an ``AsyncClient`` around an existing transport and an
``AsyncOpenAI`` around an existing client cost about a tenth of a millisecond together. So a
process builds one inner transport (one pool of keep-alive connections, bounded) and every
rollout's client wraps it in its own small transport that stamps and traces its requests.

The async pool is aiohttp's, through the aiohttp transport the SDK itself ships (its
``aiohttp`` extra, what ``openai.DefaultAioHttpClient`` uses), not httpx's own: httpx's pool
checks every open connection on each request it assigns (a socket poll each), so its cost per
request grows with the connections in flight, and at 1,000 in flight that check alone took
most of an agent's CPU (profiled with ``bench/sdk_agents.py``). Where the SDK has no aiohttp
transport, httpx's pool is the fallback. The async pool belongs to the event loop that first
used it (its connections are that loop's sockets), so there is one per running loop; the
blocking pool (httpx's, thread-safe; threads bound its concurrency) is one per process. Both
are built in an empty OpenTelemetry context, so nothing long-lived holds on to the rollout
whose first call built it.

Stale connections: a server closes an idle keep-alive connection on its own timer (uvicorn's
default, vLLM's and llama.cpp's servers: 5 s), and a request written on it at that moment fails
("connection reset by peer", "server disconnected") although the server never read it. On a
loaded machine the event loop may not yet have seen the server's FIN when the pool hands the
connection out, and the SDK's own retries (``max_retries=0`` here) would each pick another such
connection. Two defences, the same as rollgym's own client (:mod:`rollgym.http.client`): the
pool gives an idle connection up after :data:`KEEPALIVE_EXPIRY_S`, well below those servers'
keep-alive, and a request whose send died that way on a *reused* connection, before any byte
of an answer arrived, is sent once more on a fresh, unpooled connection
(:class:`ResendOnStale`). That resend is safe for a POST: a server closes a keep-alive
connection only while no request is in progress on it. A failure on a fresh connection, or once
the answer started, is never resent: the server may have run the request.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import threading
import weakref
from typing import Any

import aiohttp

from rollgym.http.client import (
    is_stale_connection,
    reuse_aware_connector,
    sent_on_reused_connection,
)

#: Connections the pool keeps open at most (requests beyond it wait for one, within the
#: client's timeout): enough for thousands of rollouts each with one model call in flight.
MAX_CONNECTIONS = 4096
#: Seconds an idle connection is kept: well below the 5 s keep-alive of uvicorn's default
#: (vLLM's and llama.cpp's servers, a ``url:`` model server), so the pool drops a connection
#: before the server closes it, even when a loaded loop releases it a few seconds late.
KEEPALIVE_EXPIRY_S = 2.0

_async_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary()
)
_sync_pool: Any = None
_sync_lock = threading.Lock()


def require_openai() -> Any:
    """The ``openai`` module, or an ImportError that says how to install it."""
    try:
        import openai
    except ImportError:
        raise ImportError(
            "RolloutContext.openai()/async_openai() need the OpenAI SDK: pip install 'rollgym[openai]'"
        ) from None
    return openai


@functools.cache
def http_library() -> Any:
    """The HTTP library the installed SDK is built on: ``httpx2`` (openai 3.x) or ``httpx``
    (1.x); both have the same transport API, and the SDK accepts only its own."""
    openai = require_openai()
    for cls in openai.DefaultAsyncHttpxClient.__mro__:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.split(".")[0])
    return importlib.import_module("httpx2")


def _limits() -> object:
    return http_library().Limits(
        max_connections=MAX_CONNECTIONS,
        max_keepalive_connections=MAX_CONNECTIONS,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


def _outside_any_span(build: Any) -> object:
    """``build()`` with no span current, so the pool is nobody's child."""
    try:
        from opentelemetry import context
    except ImportError:  # pragma: no cover - opentelemetry-api is a dependency
        return build()
    token = context.attach(context.Context())
    try:
        return build()
    finally:
        context.detach(token)


@functools.cache
def aiohttp_transport_class() -> type[Any] | None:
    """The SDK's own aiohttp transport for its HTTP library, or None where it has none."""
    base = http_library().AsyncBaseTransport
    for module_name in ("openai._vendor.httpx_aiohttp", "httpx_aiohttp"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        transport = getattr(module, "AiohttpTransport", None)
        if isinstance(transport, type) and issubclass(transport, base):
            return transport
    return None


@functools.cache
def resend_on_stale_class() -> type[Any]:
    """:class:`ResendOnStale` for the SDK's HTTP library (made once; the SDK accepts only
    transports of its own library)."""
    http = http_library()

    class ResendOnStale(http.AsyncBaseTransport):  # type: ignore[misc,name-defined]
        """The shared aiohttp pool, and one resend on a fresh connection after a stale one."""

        def __init__(self, pooled: Any, fresh: Any) -> None:
            #: The keep-alive pool every request goes to first.
            self.pooled = pooled
            #: Never pools (``force_close``): the one resend's connection is always new.
            self.fresh = fresh
            #: Requests resent after a stale pooled connection.
            self.resent = 0

        async def handle_async_request(self, request: Any) -> Any:
            try:
                return await self.pooled.handle_async_request(request)
            except http.TransportError as error:
                if not _resendable(request, error):
                    raise _truthful(error) from error.__cause__
            self.resent += 1
            try:
                return await self.fresh.handle_async_request(request)
            except http.TransportError as error:
                raise _truthful(error) from error.__cause__

        async def aclose(self) -> None:
            try:
                await self.pooled.aclose()
            finally:
                await self.fresh.aclose()

    return ResendOnStale


def _truthful(error: BaseException) -> BaseException:
    """The error the SDK should see. Its aiohttp transport maps every aiohttp connection
    error it has no closer entry for to ``ConnectTimeout``, so a server that closed the
    connection ("server disconnected", a reset) reached the agent as ``APITimeoutError`` and
    the rollout failed as a timeout; as ``RemoteProtocolError`` / ``ReadError`` it is the
    connection error it was (``APIConnectionError``)."""
    http = http_library()
    cause = error.__cause__
    if type(error) is not http.ConnectTimeout or isinstance(cause, TimeoutError):
        return error
    truer: BaseException = error
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        truer = http.RemoteProtocolError(str(cause))
    elif isinstance(cause, aiohttp.ClientOSError):
        truer = http.ReadError(str(cause))
    return truer


def _resendable(request: Any, error: BaseException) -> bool:
    """A send that died on a reused connection the server had closed, its body in memory."""
    cause = error.__cause__
    if not (isinstance(cause, aiohttp.ClientError) and is_stale_connection(cause)):
        return False
    if not sent_on_reused_connection():
        return False
    try:
        request.content  # noqa: B018 - raises when the body is a stream (not resendable)
    except http_library().RequestNotRead:
        return False
    return True


def _new_async_pool() -> object:
    aiohttp_transport = aiohttp_transport_class()
    if aiohttp_transport is None:
        return http_library().AsyncHTTPTransport(limits=_limits())
    pooled = aiohttp.ClientSession(
        connector=reuse_aware_connector()(
            limit=MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=KEEPALIVE_EXPIRY_S
        )
    )
    fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
    return resend_on_stale_class()(
        aiohttp_transport(limits=_limits(), client=pooled),
        aiohttp_transport(limits=_limits(), client=fresh),
    )


def async_pool() -> object:
    """The running loop's shared async transport (built on first use)."""
    loop = asyncio.get_running_loop()
    pool = _async_pools.get(loop)
    if pool is None:
        pool = _outside_any_span(_new_async_pool)
        _async_pools[loop] = pool
    return pool


def sync_pool() -> object:
    """The process's shared blocking transport (built on first use; safe across threads)."""
    global _sync_pool
    if _sync_pool is None:
        with _sync_lock:
            if _sync_pool is None:
                _sync_pool = _outside_any_span(
                    lambda: http_library().HTTPTransport(limits=_limits())
                )
    return _sync_pool


async def aclose_async_pool() -> None:
    """Close the running loop's pool, if it has one (a server's shutdown)."""
    pool = _async_pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.aclose()
