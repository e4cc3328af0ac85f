"""A time limit on reading each request, so slow or half-sent requests cannot pile up.

uvicorn's h11 protocol has no such limit: a client that opens a connection and sends nothing,
or half a request head, or a body slower than a trickle, holds a connection (and its memory)
for as long as it likes; thousands of them exhaust the server. :class:`BoundedH11Protocol`
gives every request :data:`REQUEST_READ_TIMEOUT_S` from its connection (or its first byte on
a kept-alive connection) until it is fully received, then closes the connection. Once a
request is whole, the limit is off: how long the handler takes is the rollout's business
(``run.timeout_s`` on the driver's side), and idle kept-alive connections are uvicorn's
keep-alive timer's business. rollgym's trace store (aiohttp) gets the same limit from
:data:`REQUEST_READ_TIMEOUT_S` (its keep-alive timer covers the head, a timeout the body).

:func:`bounded_protocol` picks the parser: httptools (C, llhttp) when it is installed, which
costs a server less CPU per request than h11 (pure Python), else h11. Both carry the same
limit; the httptools one lives in :mod:`rollgym.http.bounded_httptools` so that h11-only
installs never import httptools.
"""

from __future__ import annotations

import asyncio
import os

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from rollgym.environment_variables import ROLLGYM_HTTP_PARSER, ROLLGYM_HTTP_SERVER
from rollgym.http import REQUEST_READ_TIMEOUT_S  # noqa: F401  (still named here, as before)
from rollgym.http.read_deadline import BoundedConnection

#: States in which the client has nothing more to send for the current request.
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)


ENV_HTTP_SERVER = ROLLGYM_HTTP_SERVER
#: The uvicorn releases (major, minor) the lean cycle was written and tested against. It
#: subclasses uvicorn's httptools protocol and uses its internals, which a release may change
#: without notice; under any other uvicorn the servers keep uvicorn's own cycle.
LEAN_CYCLE_UVICORN = ((0, 54), (0, 55))


def lean_cycle_supported(version: str | None = None) -> bool:
    """Whether this uvicorn (default: the installed one) is one the lean cycle was tested on."""
    if version is None:
        import uvicorn

        version = uvicorn.__version__
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) in LEAN_CYCLE_UVICORN


def bounded_protocol() -> type[asyncio.Protocol]:
    """The bounded protocol a server passes as ``uvicorn.Config(http=...)``: the fastest that imports.

    With httptools installed, the lean request cycle on it
    (:class:`rollgym.http.lean_server.LeanHttpToolsProtocol`); ``ROLLGYM_HTTP_SERVER=uvicorn``
    keeps uvicorn's own cycle on httptools, as does a uvicorn release the lean cycle was not
    tested on (:data:`LEAN_CYCLE_UVICORN`); ``ROLLGYM_HTTP_PARSER=h11`` the pure-Python
    parser (each for comparing side by side).
    """
    if os.environ.get(ROLLGYM_HTTP_PARSER, "") != "h11":
        try:
            import httptools  # noqa: F401  (ImportError here: h11)

            if os.environ.get(ENV_HTTP_SERVER, "") == "uvicorn" or not lean_cycle_supported():
                from rollgym.http.bounded_httptools import BoundedHttpToolsProtocol

                return BoundedHttpToolsProtocol
            from rollgym.http.lean_server import LeanHttpToolsProtocol
        except ImportError:
            pass
        else:
            return LeanHttpToolsProtocol
    return BoundedH11Protocol


class BoundedH11Protocol(BoundedConnection, H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request is not whole in time (the
    bytes it has received say when a request begins and when it is whole).

    Pass it as ``uvicorn.Config(http=BoundedH11Protocol)``.
    """

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _RECEIVED:
            self._deadline.disarm()
        elif not self._deadline.armed:
            self._deadline.arm(self.transport, self.client)

    def on_response_complete(self) -> None:
        self._deadline.disarm()  # from here the idle connection is the keep-alive timer's
        super().on_response_complete()
