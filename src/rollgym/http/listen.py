"""The listening socket of a server, bound by whoever needs its address first.

A server process binds its own socket when nobody knows its address yet (a restart on its old
port, a Ray actor); the local launcher binds it in advance, so it can hand every server the
URLs of the servers it calls before any of them has started, and passes the socket on
(:mod:`rollgym.placement.reserved`). Standard library only: the launcher imports this without
the server stack.
"""

from __future__ import annotations

import socket

#: Connections the kernel queues while the server is still starting (or busy accepting).
BACKLOG = 16384


def bind_loopback(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket on ``host`` (loopback unless told); ``port`` 0: one the OS chose."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock
