"""uvicorn serving one app from a thread, on a fresh loopback socket, for tests.

A test that needs a real uvicorn beside its own event loop (the client under test runs in the
test's loop; the server must not) starts it here: the socket is bound first, so the port is
known and nothing races for it; the thread is a daemon, so a failed test never hangs the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from rollgym.http.listen import bind_loopback

#: Generous: a loaded machine may take seconds to start a server.
START_DEADLINE_S = 60.0


@contextmanager
def uvicorn_in_thread(config: uvicorn.Config) -> Iterator[tuple[int, uvicorn.Server]]:
    """Serve ``config`` until the block ends; yields the port and the uvicorn server."""
    sock = bind_loopback()
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if not server.started:
            raise RuntimeError("uvicorn did not start (see its log above)")
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
