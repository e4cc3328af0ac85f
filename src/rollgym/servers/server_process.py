"""The entry point of every server process: ``python -m rollgym.servers.server_process``.

The launcher passes everything as one JSON spec in ``_ROLLGYM_SERVER_SPEC``
(``name, kind, impl, options, server_urls, run_id, output_dir, max_request_bytes,
ready_file``). The process binds 127.0.0.1 on a free port itself (no port races between
servers), announces the port by writing ``ready_file`` atomically, and serves with uvicorn.
On SIGTERM it shuts down gracefully, flushes telemetry and writes the telemetry counts to
``<output_dir>/logs/<name>.telemetry.json`` for the run's summary. Before it binds, it checks
its set-up (:mod:`rollgym.servers.start_checks`): a broken one is a line in its log and in
``<ready_file>.start-problem``, and exit status 2, with no traceback.

When the driver is gone (``kill -9``; the process was re-parented), nobody waits for its
answers and the trace store died with the driver: it stops at once (no graceful drain) and
gives telemetry :data:`ORPHANED_FLUSH_S` instead of retrying exports to a dead store. Its log
says so in one line; the app's own stop still runs (bounded by the same budget), so uvicorn's
lifespan task ends normally instead of being cancelled into a traceback.

``--fork-server`` makes the process the local placement's fork server instead
(:mod:`rollgym.servers.fork_server`): it imports this module's stack once and forks each
server, which then runs :func:`main` as a spawned one does.

:class:`AppServer` (build the app, bind, serve with uvicorn) is the part shared with the Ray
placement (:mod:`rollgym.placement.ray`), which runs it on a thread of its own inside an
actor instead of as this process's main loop.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":  # before the imports below, which it is for
    # A server (or the fork server) imports its whole stack now: module objects, which the
    # collector would scan many times over for nothing (6-9% of the imports' CPU, measured).
    # main() enables it again; the fork server freezes what it imported before it forks.
    gc.disable()

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import uvicorn

from rollgym.event_loop import loop_factory
from rollgym.files import write_atomically
from rollgym.http.bounded_reads import bounded_protocol
from rollgym.http.client import SERVER_KEEPALIVE_S, HttpClient
from rollgym.http.listen import BACKLOG, bind_loopback
from rollgym.http.server import create_app
from rollgym.open_files import raise_open_files_limit
from rollgym.servers.base import ServerContext
from rollgym.servers.fork_server import ENV_CONTROL_FD, FORK_SERVER_ARG, run_fork_server
from rollgym.servers.spec import ServeSpec
from rollgym.servers.start_checks import (
    EXIT_SETUP,
    SetupProblem,
    check_setup,
    resolve_checked,
    write_problem,
)
from rollgym.telemetry.span_counts import SpanCountRecord, empty_record, write_server_record

#: How often a server checks that the driver that launched it is still there.
ORPHAN_POLL_S = 0.5
#: Telemetry's flush budget once the driver is gone (its store went with it).
ORPHANED_FLUSH_S = 0.5
log = logging.getLogger("rollgym.serve")
#: Where an abandoned app's lifespan logs its cancellation: nowhere (see AppServer.stop_app).
_SILENT = logging.getLogger("rollgym.serve.abandoned_app")
_SILENT.disabled = True


def setup_server_telemetry(spec: ServeSpec, environ: Mapping[str, str] | None = None) -> Any | None:
    """Telemetry of one server from the settings the launcher handed over (``environ``)."""
    try:
        from rollgym.telemetry.setup import TelemetrySettings, setup_telemetry
    except ImportError as exc:
        log.warning("telemetry is not available (%s); serving without it", exc)
        return None
    return setup_telemetry(
        TelemetrySettings.from_env(environ),
        service_name=spec.name,
        run_id=spec.run_id,
        server_name=spec.name,
        server_kind=spec.kind,
        server_instance=spec.instance,
    )


def finish_telemetry(handle: Any | None, timeout_s: float | None = None) -> SpanCountRecord:
    """Flush and shut the server's telemetry down; its span counts for the run's summary."""
    if handle is None:
        return empty_record()
    if timeout_s is None:
        handle.shutdown()
    else:
        handle.shutdown(timeout_s)
    counts: SpanCountRecord = handle.counts()
    return counts


class AppServer:
    """One server's app, bound to ``host`` on a free port, ready to be served by uvicorn.

    Built outside any request (and any rollout's context). :meth:`serve` runs in whatever
    event loop calls it: the process's main loop here, a thread's loop in a Ray actor.
    """

    def __init__(self, spec: ServeSpec, telemetry: object, host: str = "127.0.0.1") -> None:
        # its set-up checked before anything is bound: a SetupProblem is one line, no traceback
        cls = resolve_checked(spec.impl, spec.kind)
        options = cls.Options.model_validate(spec.options)
        check_setup(spec.impl, cls, options)
        context = ServerContext(
            name=spec.name,
            options=options,
            urls=spec.server_urls,
            run_id=spec.run_id,
            max_request_bytes=spec.max_request_bytes,
            client=HttpClient(
                metrics=getattr(telemetry, "http_metrics", None), replicas=spec.server_replicas
            ),
        )
        app = create_app(cls(context))
        if spec.listen_fd is not None:  # bound by the launcher, which already gave out its URL
            self.socket = socket.socket(fileno=spec.listen_fd)
        else:
            self.socket = bind_loopback(host, spec.port)
        self.host = host
        self.port: int = self.socket.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                # A request must be whole within REQUEST_READ_TIMEOUT_S (slow clients); httptools
                # when installed (less CPU per request than h11).
                http=bounded_protocol(),
                backlog=BACKLOG,
                lifespan="on",
                # No server speaks WebSocket: "auto" would import the websockets package in
                # every server (after the fork: each pays it again).
                ws="none",
                # Longer than the client pool's idle time (KEEPALIVE_S): the pool lets an
                # idle connection go before the server closes it under a request.
                timeout_keep_alive=SERVER_KEEPALIVE_S,
                timeout_graceful_shutdown=10,
            )
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self) -> bool:
        """Serve until asked to stop; True when the server started (and so stopped cleanly)."""
        await self.server.serve(sockets=[self.socket])
        return self.server.started

    def request_stop(self) -> None:
        """Ask uvicorn for its graceful shutdown (safe from any thread)."""
        self.server.should_exit = True

    def force_stop(self) -> None:
        """Stop now: no wait for requests in flight, nor for the app's own stop (see
        :meth:`stop_app`)."""
        self.request_stop()
        self.server.force_exit = True

    async def stop_app(self, budget_s: float) -> None:
        """Run the app's stop (the lifespan's shutdown) within ``budget_s``, after a forced exit.

        uvicorn skips the lifespan's shutdown on a forced exit and leaves its task waiting for
        one; the event loop then cancels that task as it closes, and starlette reports the
        cancellation as an error with its whole traceback. Sending the shutdown here ends the
        task as a graceful stop would (the app's clients closed too). An app that does not stop
        within the budget is left with one line in the log, and its cancellation is not logged.
        """
        lifespan = getattr(self.server, "lifespan", None)
        if lifespan is None or not self.server.started:
            return
        try:
            await asyncio.wait_for(lifespan.shutdown(), budget_s)
        except TimeoutError:
            log.warning("the app did not stop within %.1f s; leaving it", budget_s)
            lifespan.logger = _SILENT


async def serve(spec: ServeSpec) -> bool:
    """Serve until SIGTERM/SIGINT; True when the server started and stopped cleanly."""
    parent = os.getppid()
    handle = setup_server_telemetry(spec)
    watch: asyncio.Task[None] | None = None
    try:
        server = AppServer(spec, handle)
        write_atomically(Path(spec.ready_file), str(server.port))
        watch = asyncio.get_running_loop().create_task(_stop_when_orphaned(server, parent))
        with _signals_returning_normally():
            started = await server.serve()
        if server.server.force_exit:  # stopped without the app's own stop (orphaned)
            await server.stop_app(ORPHANED_FLUSH_S)
        return started
    finally:
        if watch is not None:
            watch.cancel()
        orphaned = os.getppid() != parent
        budget = ORPHANED_FLUSH_S if orphaned else None
        write_server_record(spec.output_dir, spec.instance, finish_telemetry(handle, budget))


async def _stop_when_orphaned(server: AppServer, parent: int) -> None:
    """Stop now, without the graceful drain, once the launching driver is gone."""
    while os.getppid() == parent:
        await asyncio.sleep(ORPHAN_POLL_S)
    log.warning(
        "the driver (pid %d) is gone; stopping now without draining requests or flushing "
        "telemetry for more than %.1f s",
        parent,
        ORPHANED_FLUSH_S,
    )
    server.force_stop()


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


def main() -> int:
    gc.enable()  # off while this process imported its stack (the top of this module)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    spec = ServeSpec.from_env()
    raise_open_files_limit(1 << 20)  # one socket per request served: as many as allowed
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            started = runner.run(serve(spec))
    except SetupProblem as problem:  # said in one line, here and by the launcher
        log.error("server %r cannot start: %s", spec.name, problem)
        write_problem(spec.ready_file, problem)
        return EXIT_SETUP
    if not started:
        log.error("server %r did not start (see the errors above)", spec.name)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == [FORK_SERVER_ARG]:  # the local placement's fork server (its children
        # call main() themselves, with this argv still theirs)
        code = run_fork_server(int(os.environ[ENV_CONTROL_FD]), main)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no interpreter teardown: its servers wait until it is gone
    sys.exit(main())
