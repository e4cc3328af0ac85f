"""uvicorn's httptools protocol with rollgym's time limit on reading each request.

The same rule as :class:`rollgym.http.bounded_reads.BoundedH11Protocol` (a request must be
whole within ``read_timeout_s`` of its connection, or of its first byte on a kept-alive
connection), on the C parser: the timer is armed when a connection opens and when a message
begins, and disarmed once the message is complete. Importing this module raises ImportError
where httptools is not installed; :func:`rollgym.http.bounded_reads.bounded_protocol` then
falls back to h11.
"""

from __future__ import annotations

import httptools  # noqa: F401  (ImportError here is the fallback's signal)
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rollgym.http.read_deadline import BoundedConnection


class BoundedHttpToolsProtocol(BoundedConnection, HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request is not whole in time
    (the parser's callbacks say when a message begins and when it is complete)."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._deadline.armed:
            self._deadline.arm(self.transport, self.client)

    def on_message_complete(self) -> None:
        self._deadline.disarm()  # the request is whole: the handler's time is not the client's
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._deadline.disarm()  # from here the idle connection is the keep-alive timer's
        super().on_response_complete()
