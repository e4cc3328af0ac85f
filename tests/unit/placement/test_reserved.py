"""``placement/reserved.py``: each local server's address, bound before its process starts."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from rollgym.placement.reserved import Reservations


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def test_one_socket_per_instance_and_its_url_is_stable() -> None:
    reservations = Reservations()
    try:
        first = reservations.reserve("policy@0")
        assert reservations.reserve("policy@0") == first  # reserved once
        other = reservations.reserve("policy@1")
        assert first.startswith("http://127.0.0.1:") and _port(first) != _port(other)
        # Listening already: a caller of a server that is still starting waits, not refused.
        with socket.create_connection(("127.0.0.1", _port(first)), timeout=5):
            pass
    finally:
        reservations.close()


def test_take_hands_the_socket_over_once() -> None:
    reservations = Reservations()
    url = reservations.reserve("agent@0")
    sock = reservations.take("agent@0")
    try:
        assert sock is not None and sock.getsockname()[1] == _port(url)
        assert reservations.take("agent@0") is None
        reservations.close()  # the taken socket is the caller's: close leaves it open
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=5):
            pass
    finally:
        if sock is not None:
            sock.close()


def test_close_releases_what_no_process_took() -> None:
    reservations = Reservations()
    url = reservations.reserve("env@0")
    reservations.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", _port(url)), timeout=5)
    assert reservations.take("env@0") is None
