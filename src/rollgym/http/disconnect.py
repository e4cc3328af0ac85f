"""A request whose client has gone is cancelled: its handler stops, and so do its own calls.

uvicorn, like most ASGI servers, only *tells* an app that its client disconnected (``receive``
answers ``http.disconnect``); a handler that is awaiting something else (an agent's model call,
a model server's call to its engine) never looks, and runs to its end for nobody. A rollout
that ends (its time limit, a Ctrl-C, its agent dying) closes its connection, so every hop
below it must stop on that close: the driver's connection to the agent, the agent's to the
model server, the model server's to the engine, which aborts the generation on the close
(vLLM does). :class:`CancelOnDisconnect` is that rule for rollgym's servers: when a connection
is lost before the answer of the request it carries was complete, the task running that
request is cancelled. Cancelling an outgoing call closes its connection instead of returning
it to the pool (:mod:`rollgym.http.lean`, aiohttp), so the close travels on down the chain.

A handler whose answer went out whole is never cancelled (work it does after its answer, such
as a background task, is its own). The cancellation ends quietly: it is the expected end of
an abandoned request, not an error of the app, so no traceback is logged and no 500 written.
List the mixin before uvicorn's protocol (``class P(CancelOnDisconnect, HttpToolsProtocol)``):
it wraps the protocol's ``app`` and hooks ``connection_lost``; it reads the request cycle
from the ``receive`` the server hands the app (uvicorn's cycles and the lean one alike).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Protocol

#: The message of the cancellation, as a handler's ``CancelledError`` carries it.
DISCONNECTED = "the client closed its connection before the answer was complete"


class _Cycle(Protocol):
    """What this module reads of a request cycle (uvicorn's and the lean one have both)."""

    response_complete: bool


class CancelOnDisconnect(asyncio.Protocol):
    """Cancels the handler of a request whose connection is lost before its answer is whole."""

    app: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The handlers running on this connection, each with its request's cycle.
        self._handlers: dict[asyncio.Task[Any], _Cycle] = {}
        #: The handlers this connection cancelled (their end is quiet).
        self._abandoned: set[asyncio.Task[Any]] = set()
        self.app = functools.partial(self._guarded, self.app)

    async def _guarded(self, app: Any, scope: Any, receive: Any, send: Any) -> None:
        task = asyncio.current_task()
        cycle = getattr(receive, "__self__", None)
        if task is None or cycle is None:
            await app(scope, receive, send)
            return
        self._handlers[task] = cycle
        try:
            await app(scope, receive, send)
        except asyncio.CancelledError:
            if task not in self._abandoned or task.uncancel() > 0:
                raise  # not ours, or someone else cancelled it too
        else:
            if task in self._abandoned and task.cancelling():
                task.uncancel()  # the app ended on our cancellation without raising it
        finally:
            del self._handlers[task]
            self._abandoned.discard(task)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.cancel_abandoned()

    def cancel_abandoned(self) -> None:
        """Cancel each handler of this connection whose answer is not complete (the connection
        is lost; a protocol that replaces ``connection_lost`` calls this at its end)."""
        for task, cycle in list(self._handlers.items()):
            if not cycle.response_complete and not task.done() and task not in self._abandoned:
                self._abandoned.add(task)
                task.cancel(DISCONNECTED)
