"""uvicorn serving one app on a fresh loopback socket, for tests: from a thread, or in the
test's own event loop.

A test that needs a real uvicorn beside its own event loop (the client under test runs in the
test's loop; the server must not) starts it in a thread (:func:`uvicorn_in_thread`); one whose
server may share the loop serves it as a task (:func:`uvicorn_in_loop`). Either way the socket
is bound first, so the port is known and nothing races for it, and start-up is waited on (the
server says it started) with a generous bound, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

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


@asynccontextmanager
async def uvicorn_in_loop(
    app: Any, stop_within_s: float = 10.0, **config: Any
) -> AsyncIterator[str]:
    """Serve ``app`` as a task of the running loop until the block ends; yields its base URL.

    ``config`` goes to ``uvicorn.Config`` (``http=``, ``lifespan=`` ...; quiet by default). The
    server runs without uvicorn's signal handlers (the test process keeps its own); at the end
    it is asked to exit and awaited up to ``stop_within_s``."""
    sock = bind_loopback()
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, **config}
    server = uvicorn.Server(uvicorn.Config(app, **options))
    task = asyncio.create_task(server._serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not server.started and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped during start-up")
        if not server.started:
            raise RuntimeError("uvicorn did not start (see its log above)")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, stop_within_s)
        sock.close()
