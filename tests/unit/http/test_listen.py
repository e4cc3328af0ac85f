"""``http/listen.py``: a server's listening socket, bound before anyone serves on it."""

from __future__ import annotations

import socket

import pytest

from rollgym.http.listen import bind_loopback


def test_a_bound_socket_queues_connections_before_anyone_accepts() -> None:
    """What lets the launcher hand out URLs before the servers start: a client connecting
    to a socket nobody accepts on yet waits in the backlog instead of being refused."""
    sock = bind_loopback()
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert sock.get_inheritable()  # a child process serves on it
        with socket.create_connection((host, port), timeout=5) as client:
            client.sendall(b"ping")
            conn, _ = sock.accept()
            with conn:
                assert conn.recv(4) == b"ping"
    finally:
        sock.close()


def test_a_port_in_use_raises_and_leaves_no_socket_open() -> None:
    held = bind_loopback()
    try:
        port = held.getsockname()[1]
        with pytest.raises(OSError):
            bind_loopback(port=port)
    finally:
        held.close()
