"""Run the trace store server until SIGTERM/SIGINT, then drain and close.

Why its own module: the shutdown order matters for "never lose an accepted batch": stop
accepting connections, let in-flight requests finish (their batches commit), then stop the
writer (which drains its queue) and checkpoint the WAL. The chosen port is printed and, when
asked, written atomically to a ready file so a parent process (launch.py) can find it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path

from aiohttp import web

from rollgym.tracestore.access import TOKEN_ENV, is_loopback, require_token
from rollgym.tracestore.api import add_api_routes
from rollgym.tracestore.receiver import DEFAULT_MAX_BODY_BYTES, add_otlp_routes, viewer_dir
from rollgym.tracestore.writer import BatchWriter

log = logging.getLogger(__name__)


def build_app(
    writer: BatchWriter,
    db_path: Path,
    run_dir: Path | None,
    max_body: int,
    token: str | None = None,
) -> web.Application:
    """The one app: OTLP receiver, viewer JSON API, static viewer, /health.

    With ``token`` every route but ``/health`` requires ``Authorization: Bearer <token>``.
    """
    middlewares = [require_token(token)] if token else []
    app = web.Application(client_max_size=max_body + 1, middlewares=middlewares)
    add_otlp_routes(app, writer, max_body)
    add_api_routes(app, db_path, run_dir)
    static = viewer_dir()

    async def index(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(static / "index.html")

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "name": "tracestore", "kind": "tracestore"})

    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_static("/static/", static)
    return app


async def serve(
    db_path: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    run_dir: Path | None = None,
    ready_file: Path | None = None,
    max_body: int = DEFAULT_MAX_BODY_BYTES,
    token: str | None = None,
) -> None:
    """Serve until a termination signal; every accepted batch is committed before return.

    Listening beyond loopback requires ``token`` (see :mod:`rollgym.tracestore.access`).
    """
    if not token and not is_loopback(host):
        raise ValueError(
            f"the trace store listens on {host}, beyond loopback: it needs a bearer token "
            f"(set {TOKEN_ENV})"
        )
    writer = BatchWriter(db_path)
    writer.start()
    # auto_decompress=False: receiver.decompress inflates gzip itself, bounded by max_body.
    app = build_app(writer, db_path, run_dir, max_body, token)
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    endpoint = f"http://{host}:{bound}"
    guarded = " (bearer token required)" if token else ""
    print(
        f"rollgym trace store: {endpoint} (OTLP {endpoint}/v1/traces, db {db_path}){guarded}",
        flush=True,
    )
    if ready_file is not None:
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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
