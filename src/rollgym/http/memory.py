"""An in-memory transport: answers from a function, no socket, for tests and embedders.

``HttpClient(transport=MemoryTransport(handler))`` sends every JSON exchange to
``handler(request)`` instead of the network; everything above the transport runs as it does
for real: the JSON body, ``traceparent``, the span, size limits, redirects, replicas, metrics
and the translation of failures into rollgym's errors. So a test of code that calls other
servers needs no server, and a test of the client's own rules needs no socket::

    def handler(request: Request) -> Answer:
        return json_answer({"reward": 1.0})

    async with HttpClient(transport=MemoryTransport(handler)) as client:
        answer = await client.post_json("env", "http://env/verify", {"answer": "4"})

The handler may be a coroutine function (it then runs under the request's time limit), and
may raise ``OSError``: the client sees a failed send (``ConnectionRefusedError``: nothing
listened). Streams (:meth:`~rollgym.http.client.HttpClient.stream`) still go through aiohttp.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import orjson

from rollgym.http.transport import (
    Answer,
    AnswerTooLarge,
    Exchange,
    Headers,
    Request,
    SendFailed,
)

#: What answers a request: an answer, or an awaitable of one.
Handler = Callable[[Request], Answer | Awaitable[Answer]]


def json_answer(
    data: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Answer:
    """An answer whose body is ``data`` as JSON."""
    head = {"Content-Type": "application/json", **(headers or {})}
    return Answer(status, head, orjson.dumps(data))


class MemoryTransport:
    """:class:`~rollgym.http.transport.Transport` that calls ``handler`` for each request;
    ``requests`` lists what it was sent, in order."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        #: Never anything to resend: no connection to go stale.
        self.resent = 0

    async def send(self, request: Request, exchange: Exchange) -> Answer:
        self.requests.append(request)
        try:
            answer = self.handler(request)
            if not isinstance(answer, Answer):
                async with asyncio.timeout(exchange.timeout):
                    answer = await answer
        except TimeoutError:
            raise  # the time limit (an OSError too): the client's RequestTimeout
        except OSError as exc:
            raise SendFailed(exc, refused=isinstance(exc, ConnectionRefusedError)) from None
        limit = exchange.limits.max_response_bytes
        if limit is not None and len(answer.body) > limit:
            raise AnswerTooLarge(str(len(answer.body)))
        headers = Headers()
        for name, value in answer.headers.items():
            headers[name.lower()] = value
        return Answer(answer.status, headers, answer.body)

    async def close(self) -> None:
        return None
