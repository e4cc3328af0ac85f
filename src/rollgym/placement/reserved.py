"""Addresses handed out before their servers start: the local placement's listening sockets.

Binding each local server's socket in the launcher, before any server starts, makes every
URL known at once, so the launcher can start all servers together (a server is told the URLs
of the servers it calls, and those need not be up yet: a request to one that is still
starting waits in its socket's backlog). Each socket is passed to its server process, which
serves on it; the launcher's copy is closed as soon as the child has it, so a server that
dies refuses connections instead of leaving them queued.
"""

from __future__ import annotations

import socket

from rollgym.http.listen import bind_loopback

HOST = "127.0.0.1"


class Reservations:
    """Listening sockets bound here, by server instance, until their process takes them."""

    def __init__(self) -> None:
        self._sockets: dict[str, socket.socket] = {}

    def reserve(self, instance: str) -> str:
        """Bind a loopback socket for ``instance`` (once); its base URL."""
        sock = self._sockets.get(instance)
        if sock is None:
            sock = self._sockets[instance] = bind_loopback(HOST)
        return f"http://{HOST}:{sock.getsockname()[1]}"

    def take(self, instance: str) -> socket.socket | None:
        """The socket reserved for ``instance`` (now the caller's to pass on and close)."""
        return self._sockets.pop(instance, None)

    def pending(self) -> int:
        """How many reserved sockets no process has taken yet."""
        return len(self._sockets)

    def close(self) -> None:
        """Close every socket no process took (a launch that failed before they started)."""
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
