"""The fork server: one process imports the server stack once, then forks each local server.

Started by the local placement (:mod:`rollgym.placement.forked`) as
``python -m rollgym.servers.server_process --fork-server``. Every server process of a run
imports the same FastAPI, uvicorn, aiohttp, pydantic and OpenTelemetry modules; spawned one by
one, five servers import them five times (about 1.7 s of CPU each on the development
machine), which is most of a run's start-up. Forked from this process, each only builds its
own app.

The protocol, over one ``SOCK_SEQPACKET`` socket (one message per request):

- the driver sends ``{"spec": <ServeSpec JSON>, "env": {...}, "log_path": ..., "driver_pid":
  ...}`` with the server's listening socket attached (``SCM_RIGHTS``);
- this process imports what the server needs (its class too), forks, and answers the child's
  pid (or ``spawn`` when a class it imported started a thread: the driver spawns that
  server); a child that cannot start says why in its own log;
- a fork server started before the run's folder was known (right after the driver read the
  config, so its imports overlap the driver's) is sent ``{"bind": {"log_path": ...,
  "early_log": ...}}`` once the folder exists: it moves its output to the run's log (what it
  wrote before comes along) and answers ``ok``;
- when the driver closes its end (every reserved server has been forked), this process exits.

Why it exits then: its children are re-parented to the driver, which made itself a "child
subreaper" (Linux ``PR_SET_CHILD_SUBREAPER``) before starting this process. A forked server
waits for that adoption before it serves, then asks to die with the driver
(``PR_SET_PDEATHSIG``), exactly as a spawned server does; the driver reaps and signals it as
its own child. Nothing here starts a thread, so the fork copies a single-threaded process.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn

from rollgym.child_process import die_with_parent
from rollgym.environment_variables import ROLLGYM_FORK_SERVER_FD, ROLLGYM_FORK_SERVER_PRELOAD
from rollgym.servers.spec import ENV_SPEC, ServeSpec

#: ``--fork-server``: the argument that makes ``server_process`` this fork server.
FORK_SERVER_ARG = "--fork-server"
ENV_CONTROL_FD = ROLLGYM_FORK_SERVER_FD
ENV_PRELOAD = ROLLGYM_FORK_SERVER_PRELOAD
#: The answer instead of a pid when this process runs a thread (a server class started one at
#: import): a fork would copy it half-stopped, so the driver spawns that server (and every
#: later one: the thread stays) instead.
SPAWN_INSTEAD = b"spawn"
#: The answer to a ``bind`` request: this process writes to the run's log now.
BOUND = b"ok"
#: The largest request (a spec plus the server's environment).
MAX_REQUEST_BYTES = 1 << 20
#: How long a forked server waits for the driver to adopt it (the fork server to exit).
ADOPTION_TIMEOUT_S = 60.0


def run_fork_server(control_fd: int, serve: Callable[[], int]) -> int:
    """Fork one server per request until the driver closes the socket; 0 then. Each child
    calls ``serve`` (``server_process.main``) once it is set up as a spawned server is."""
    control = socket.socket(fileno=control_fd)
    own_pid = os.getpid()
    preloaded_telemetry = _preload_named(os.environ.get(ENV_PRELOAD))
    _import_serving()
    # What is imported stays for good: frozen, no collection in a server scans (and so copies)
    # those pages; each server collects what it allocates itself (main() enables the collector)
    gc.freeze()
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, MAX_REQUEST_BYTES, 1)
        except ConnectionError:
            return 0
        if not message:
            return 0
        request = json.loads(message)
        if "bind" in request:
            _bind(request["bind"])
            control.send(BOUND)
            continue
        spec = ServeSpec(**json.loads(request["spec"]))
        spec = replace(spec, listen_fd=fds[0] if fds else None)
        if not preloaded_telemetry:
            preloaded_telemetry = _preload_telemetry(request["env"])
        _preload_impl(spec)
        if threading.active_count() > 1:  # an imported class started one: forking is unsafe
            control.send(SPAWN_INSTEAD)
            continue
        pid = os.fork()
        if pid == 0:
            _forked_server(control, request, spec, own_pid, serve)
        for fd in fds:
            os.close(fd)
        control.send(str(pid).encode())
        print(f"fork server {own_pid}: forked {spec.instance} as pid {pid}", flush=True)


def _bind(bind: dict[str, str]) -> None:
    """Move this process's output to the run's log, the lines written before it included."""
    log_path, early_log = bind["log_path"], bind.get("early_log")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    if early_log:
        with contextlib.suppress(OSError), open(early_log, "rb") as early:
            written = early.read()
            with open(log_path, "ab") as log:
                log.write(written)
        with contextlib.suppress(OSError):
            os.unlink(early_log)
    _append_output_to(log_path)


def _preload_named(named: str | None) -> bool:
    """Before the first request (the driver may still be starting the trace store): the
    telemetry SDK and the classes ``_ROLLGYM_FORK_SERVER_PRELOAD`` names. True when it named
    any (telemetry preloaded)."""
    if not named:
        return False
    _import_telemetry()
    for impl, kind in json.loads(named):
        _preload_impl(ServeSpec(name="preload", kind=kind, impl=impl, ready_file=""))
    return True


def _preload_telemetry(env: dict[str, str]) -> bool:
    """Import the telemetry SDK here when the run exports anything (every server sets it up)."""
    from rollgym.telemetry.settings import TelemetrySettings

    settings = TelemetrySettings.from_env(env)
    if settings.traces_exporter == "none" and settings.metrics_exporter == "none":
        return False
    _import_telemetry()
    return True


def _import_telemetry() -> None:
    """The telemetry SDK, and the span-exporter child each forked server forks (it runs that
    module): imported here once, shared by every fork."""
    with contextlib.suppress(ImportError):
        import rollgym.telemetry.pipeline.child  # noqa: F401
        import rollgym.telemetry.setup  # noqa: F401


def _import_serving() -> None:
    """What every server imports only once it serves (uvloop's loop, uvicorn's httptools
    protocol): imported here once instead of once in every fork (about 0.05 s of CPU each)."""
    from rollgym.event_loop import loop_factory
    from rollgym.http.bounded_reads import bounded_protocol

    loop_factory()
    bounded_protocol()


def _preload_impl(spec: ServeSpec) -> None:
    """Import the server's class once here, so every replica forked after shares it; one that
    does not import is left for the forked server to report in its log."""
    from rollgym.servers.registry import resolve_impl

    with contextlib.suppress(Exception):
        resolve_impl(spec.impl, spec.kind)


def _forked_server(
    control: socket.socket,
    request: dict[str, object],
    spec: ServeSpec,
    fork_server: int,
    serve: Callable[[], int],
) -> NoReturn:
    """The child: its own session, log and environment, adopted by the driver, then serve."""
    code = 1
    try:
        control.close()
        os.setsid()  # a terminal's Ctrl-C reaches only the driver
        _redirect_output(str(request["log_path"]))
        env = request["env"]
        if not isinstance(env, dict):
            raise TypeError("the fork request's env is not a mapping")
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        os.environ[ENV_SPEC] = spec.to_env()
        driver = request["driver_pid"]
        if not isinstance(driver, int):
            raise TypeError("the fork request's driver_pid is not a number")
        _wait_adopted(driver, fork_server)
        code = serve()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect_output(log_path: str) -> None:
    """stdout and stderr appended to the server's log, stdin from /dev/null (as spawned)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _append_output_to(log_path)


def _append_output_to(log_path: str) -> None:
    """This process's stdout and stderr (descriptors 1 and 2) appended to ``log_path``."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _wait_adopted(driver: int, fork_server: int) -> None:
    """Until the driver is this process's parent; then die with it, as a spawned server does."""
    deadline = time.monotonic() + ADOPTION_TIMEOUT_S
    while os.getppid() == fork_server:
        if time.monotonic() > deadline:
            raise SystemExit(f"the fork server (pid {fork_server}) did not exit in time")
        time.sleep(0.002)
    if os.getppid() != driver:
        raise SystemExit(f"the driver (pid {driver}) is gone; not serving")
    arm = die_with_parent(signal.SIGTERM, parent=driver)
    if arm is not None:
        arm()
