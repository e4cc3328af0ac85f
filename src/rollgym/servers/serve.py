"""The entry point of every server process: ``python -m rollgym.servers.serve``.

The launcher passes everything as one JSON spec in ``ROLLGYM_SERVER_SPEC``
(``name, kind, impl, options, server_urls, run_id, output_dir, max_request_bytes,
ready_file``). The process binds 127.0.0.1 on a free port itself (no port races between
servers), announces the port by writing ``ready_file`` atomically, and serves with uvicorn.
On SIGTERM it shuts down gracefully, flushes telemetry and writes the telemetry counts to
``<output_dir>/logs/<name>.telemetry.json`` for the run's summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from rollgym.http.client import HttpClient
from rollgym.http.server import create_app
from rollgym.servers.base import ServerContext
from rollgym.servers.registry import resolve_impl
from rollgym.servers.spec import ServeSpec

BACKLOG = 16384
log = logging.getLogger("rollgym.serve")


def bind_loopback() -> socket.socket:
    """A listening socket on 127.0.0.1 with a port the OS chose."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def write_atomically(path: Path, text: str) -> None:
    """Write then rename, so a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _setup_telemetry(spec: ServeSpec) -> Any | None:
    try:
        from rollgym.telemetry.setup import TelemetrySettings, setup_telemetry
    except ImportError as exc:
        log.warning("telemetry is not available (%s); serving without it", exc)
        return None
    return setup_telemetry(
        TelemetrySettings.from_env(),
        service_name=spec.name,
        run_id=spec.run_id,
        server_name=spec.name,
        server_kind=spec.kind,
    )


def _finish_telemetry(spec: ServeSpec, handle: Any | None) -> None:
    counts = {"spans_exported": 0, "spans_dropped": 0}
    if handle is not None:
        handle.shutdown()
        counts = dict(handle.counts())
    if spec.output_dir:
        write_atomically(
            Path(spec.output_dir) / "logs" / f"{spec.name}.telemetry.json", json.dumps(counts)
        )


async def serve(spec: ServeSpec) -> bool:
    """Serve until SIGTERM/SIGINT; True when the server started and stopped cleanly."""
    cls = resolve_impl(spec.impl, spec.kind)
    options = cls.Options.model_validate(spec.options)
    handle = _setup_telemetry(spec)
    try:
        metrics = getattr(handle, "http_metrics", None)
        context = ServerContext(
            name=spec.name,
            options=options,
            urls=spec.server_urls,
            run_id=spec.run_id,
            max_request_bytes=spec.max_request_bytes,
            client=HttpClient(metrics=metrics),
        )
        app = create_app(cls(context))
        sock = bind_loopback()
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            backlog=BACKLOG,
            lifespan="on",
            timeout_graceful_shutdown=10,
        )
        server = uvicorn.Server(config)
        write_atomically(Path(spec.ready_file), str(sock.getsockname()[1]))
        with _signals_returning_normally():
            await server.serve(sockets=[sock])
        return server.started
    finally:
        _finish_telemetry(spec, handle)


def _ignore_signal(signum: int, frame: object) -> None:
    """Do nothing: uvicorn has already handled the stop signal."""


@contextlib.contextmanager
def _signals_returning_normally() -> Iterator[None]:
    """uvicorn re-raises the stop signal after its graceful shutdown; make that a no-op here
    so the process goes on to flush telemetry instead of dying on the re-raised SIGTERM."""
    saved = {sig: signal.signal(sig, _ignore_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main() -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    spec = ServeSpec.from_env()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        started = runner.run(serve(spec))
    if not started:
        log.error("server %r did not start (see the errors above)", spec.name)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
