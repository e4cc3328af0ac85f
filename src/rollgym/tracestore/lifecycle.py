"""Run the trace store server until SIGTERM/SIGINT, then drain and close.

Why its own module: the shutdown order matters for "never lose an accepted batch": stop
accepting connections, let in-flight requests finish (their batches commit), then stop the
writer (which drains its queue) and checkpoint the WAL. The chosen port is printed and, when
asked, written atomically to a ready file so a parent process (store_process.py) can find it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from rollgym.files import write_atomically
from rollgym.http import REQUEST_READ_TIMEOUT_S
from rollgym.telemetry.pipeline.frames import TRACES_PATH
from rollgym.tracestore.access import TOKEN_ENV, is_loopback, require_token
from rollgym.tracestore.guard import allowed_hosts, guard_middleware
from rollgym.tracestore.receiver import DEFAULT_MAX_BODY_BYTES, add_otlp_routes
from rollgym.tracestore.writer import BatchWriter

log = logging.getLogger(__name__)


class ListenError(OSError):
    """The store cannot listen where it was told: one line naming the address."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = "the port is in use by another process (give another --port, or 0)"
        super().__init__(exc.errno, f"cannot listen on {host}:{port}: {reason}")


def build_app(
    writer: BatchWriter,
    max_body: int,
    token: str | None = None,
    read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
    hosts: frozenset[str] | None = None,
    extra_routes: Callable[[web.Application], None] | None = None,
) -> web.Application:
    """The one app: OTLP receiver, /health, and what ``extra_routes`` mounts.

    With ``token`` every route but ``/health`` requires ``Authorization: Bearer <token>``.
    ``hosts``: the names a request's ``Host`` may carry (default: loopback names only); with a
    token the token is the protection and any ``Host`` is accepted (engines on other machines
    address the store by their own name for it). See :mod:`rollgym.tracestore.guard`.
    ``extra_routes`` mounts a higher layer's routes: the viewer (its page and JSON routes over
    the store and the run's files, :func:`rollgym.reading.run_views.viewer`), which
    ``rollgym traces serve`` hands in; the store itself is ingest and storage only.
    """
    if token:
        guard = guard_middleware(None)
    else:
        guard = guard_middleware(hosts if hosts is not None else allowed_hosts("127.0.0.1"))
    middlewares = [require_token(token), guard] if token else [guard]
    app = web.Application(client_max_size=max_body + 1, middlewares=middlewares)
    add_otlp_routes(app, writer, max_body, read_timeout_s)
    if extra_routes is not None:
        extra_routes(app)

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "name": "tracestore", "kind": "tracestore"})

    app.router.add_get("/health", health)
    return app


def make_runner(app: web.Application, read_timeout_s: float) -> web.AppRunner:
    """The store's runner. Its keep-alive timer also closes a connection whose request head
    is not whole in ``read_timeout_s`` (aiohttp arms it at connect), so slow clients are
    bounded; the body has its own limit in the receiver, after which the rest of a refused
    body is read for at most a second (``lingering_time``) before the connection closes."""
    return web.AppRunner(
        app,
        access_log=None,
        auto_decompress=False,
        keepalive_timeout=read_timeout_s,
        lingering_time=1.0,
    )


async def serve(
    db_path: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready_file: Path | None = None,
    max_body: int = DEFAULT_MAX_BODY_BYTES,
    token: str | None = None,
    allow_hosts: tuple[str, ...] = (),
    extra_routes: Callable[[web.Application], None] | None = None,
    listen_fd: int | None = None,
) -> None:
    """Serve until a termination signal; every accepted batch is committed before return.

    ``listen_fd``: a socket already listening on ``host``/``port`` (bound by the parent, so
    its address was known before this process started): served instead of binding one.

    Listening beyond loopback requires ``token`` (see :mod:`rollgym.tracestore.access`).
    ``allow_hosts``: host names besides loopback and ``host`` that requests may address
    (without a token; a machine name when serving on 0.0.0.0).
    """
    if not token and not is_loopback(host):
        raise ValueError(
            f"the trace store listens on {host}, beyond loopback: it needs a bearer token "
            f"(set {TOKEN_ENV})"
        )
    # Said in the ready line: a mistyped --db would otherwise look like a run with no spans.
    created = not db_path.exists()
    writer = BatchWriter(db_path)
    writer.start()
    # auto_decompress=False: receiver.decompress inflates gzip itself, bounded by max_body.
    hosts = allowed_hosts(host, allow_hosts)
    app = build_app(writer, max_body, token, REQUEST_READ_TIMEOUT_S, hosts, extra_routes)
    runner = make_runner(app, REQUEST_READ_TIMEOUT_S)
    await runner.setup()
    site: web.BaseSite
    if listen_fd is not None:
        site = web.SockSite(runner, socket.socket(fileno=listen_fd))
    else:
        site = web.TCPSite(runner, host, port, backlog=1024)
    try:
        await site.start()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        await runner.cleanup()
        await asyncio.to_thread(writer.close)
        raise ListenError(host, port, exc) from None
    bound = runner.addresses[0][1]
    endpoint = f"http://{host}:{bound}"
    guarded = " (bearer token required)" if token else ""
    new = ", a new empty store" if created else ""
    print(
        f"rollgym trace store: {endpoint} (OTLP {endpoint}{TRACES_PATH}, db {db_path}{new})"
        f"{guarded}",
        flush=True,
    )
    if ready_file is not None:
        # ready means "commits at once": a run waits for this before its first rollout, so
        # no rollout ends while its spans could only wait in a process that may be killed
        try:
            await writer.warm()
        except Exception as exc:  # noqa: BLE001 - the pool starts new workers on the next request
            log.warning("the trace store's workers did not start (%s); serving anyway", exc)
        _write_ready(ready_file, {"endpoint": endpoint, "port": bound, "pid": os.getpid()})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()  # stops accepting; in-flight handlers finish
        await asyncio.to_thread(writer.close)  # drains the queue, checkpoints
    print(f"rollgym trace store stopped ({writer.spans_written} spans written)", flush=True)


def _write_ready(path: Path, data: dict[str, object]) -> None:
    write_atomically(path, json.dumps(data))
