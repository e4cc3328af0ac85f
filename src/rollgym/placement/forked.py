"""The driver's side of the fork server (:mod:`rollgym.servers.fork_server`).

:class:`ForkServer` starts ``python -m rollgym.servers.server_process --fork-server`` once
per launch; it imports the server stack while the launcher binds sockets and builds specs,
then forks one server per :meth:`ForkServer.fork`. Once every reserved server has been
forked the driver closes the control socket, the fork server exits, and its children are
re-parented here: this process is a child subreaper for as long as a fork server runs
(Linux ``PR_SET_CHILD_SUBREAPER``). :class:`ForkedChild` then waits for, signals and reaps
a forked server as :class:`subprocess.Popen` does a spawned one.

Only on Linux (child subreapers, ``PR_SET_PDEATHSIG``), and not with ``ROLLGYM_FORK_SERVER=0``
(:func:`rollgym.forked_child.forking_enabled`); the local placement spawns each server
otherwise, and always for a restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import rollgym.start_gate as start_gate
from rollgym.child_process import libc, log_tail, spawn_child
from rollgym.environment_variables import ROLLGYM_FORK_SERVER_LOGS
from rollgym.errors import LaunchError
from rollgym.forked_child import ENV_FORK_SERVER as ENV_FORK_SERVER
from rollgym.forked_child import ForkedChild as ForkedChild
from rollgym.forked_child import forking_enabled
from rollgym.servers.fork_server import (
    BOUND,
    ENV_CONTROL_FD,
    ENV_PRELOAD,
    FORK_SERVER_ARG,
    SPAWN_INSTEAD,
)
from rollgym.servers.spec import ServeSpec

if TYPE_CHECKING:
    from rollgym.config import JobConfig
    from rollgym.config.data import ConfigRead

ENV_FORK_SERVER_LOGS = ROLLGYM_FORK_SERVER_LOGS
_PR_SET_CHILD_SUBREAPER = 36
_REPLY_BYTES = 64

_subreaper_lock = threading.Lock()
_subreaper_users = 0


def _prctl_subreaper(on: bool) -> bool:
    return int(libc().prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0


def _adopt_orphans(on: bool) -> bool:
    """Count a user of this process's subreaper flag; set it for the first, clear it after the
    last (so orphans of anything else go back to init). False when the kernel refused."""
    global _subreaper_users
    with _subreaper_lock:
        if on:
            if _subreaper_users == 0 and not _prctl_subreaper(True):
                return False
            _subreaper_users += 1
        else:
            _subreaper_users -= 1
            if _subreaper_users == 0:
                _prctl_subreaper(False)
        return True


class ForkServer:
    """One fork server for one launch: :meth:`fork` a server per reserved socket, then
    :meth:`finish` (the fork server exits; its children are this process's)."""

    def __init__(
        self, env: Mapping[str, str], log_path: Path, *, early_for: Path | None = None
    ) -> None:
        """``early_for``: the logs folder of the run it is for, which does not exist yet; it
        writes to ``log_path`` (a temporary file) until :meth:`bind` moves it there."""
        self.log_path = log_path
        self.early = early_for is not None
        #: After :meth:`bind`: its temporary log, and whether its answer is still to be read.
        self._early_log: Path | None = None
        self._bind_unanswered = False
        #: Whether a server was asked for: until then it has no children and holds nothing.
        self._asked = False
        #: The run's logs folder, in its environment (and so in its servers' ``/proc``).
        self.run_logs = early_for if early_for is not None else log_path.parent
        #: The environment it was started in (each server's own comes with its request).
        self.start_env = dict(env)
        self._lock = asyncio.Lock()
        self._subreaper = _adopt_orphans(True)
        if not self._subreaper:
            raise OSError("this kernel refused PR_SET_CHILD_SUBREAPER")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = spawn_child(
                [sys.executable, "-m", "rollgym.servers.server_process", FORK_SERVER_ARG],
                # the run's folder in its environment names the run its servers belong to
                # (forked servers keep the environment of the process they are forked from)
                env={
                    **self.start_env,
                    ENV_CONTROL_FD: str(theirs.fileno()),
                    ENV_FORK_SERVER_LOGS: str(self.run_logs),
                },
                log_path=log_path,
                new_session=True,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            _adopt_orphans(False)
            self._subreaper = False
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._control: socket.socket | None = ours
        # A trace store started from now on waits until this one has forked its servers
        # and they are up (rollgym/start_gate.py): its imports would take the cores the
        # servers wait for.
        start_gate.hold()
        self._holding = True

    def bind(self, log_path: Path) -> None:
        """An early fork server writes to the run's ``log_path`` from now on (its earlier
        lines too). Not waited for: it reads the request once its imports are done, and its
        answer is read before the first fork's. Raises ``OSError`` when it is closed."""
        if self._control is None:
            raise OSError("the fork server was closed")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        early_log = str(self.log_path) if self.early else None
        request = {"bind": {"log_path": str(log_path), "early_log": early_log}}
        self._control.send(json.dumps(request).encode())  # one small message: never blocks
        self._early_log = self.log_path if self.early else None
        self._bind_unanswered = True
        self.log_path = log_path
        self.early = False

    async def fork(
        self, spec: ServeSpec, env: Mapping[str, str], log_path: Path, listener: socket.socket
    ) -> ForkedChild:
        """Fork one server serving on ``listener`` (this process's copy stays the caller's)."""
        request = json.dumps(
            {
                "spec": spec.to_env(),
                "env": dict(env),
                "log_path": str(log_path),
                "driver_pid": os.getpid(),
            }
        ).encode()
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._control is None:
                raise self._failure("was closed before every server was forked", spec)
            if self._bind_unanswered:
                bound = await loop.sock_recv(self._control, _REPLY_BYTES)
                if bound != BOUND:
                    raise self._failure("did not take the run's log", spec)
                self._bind_unanswered = False
            self._asked = True
            socket.send_fds(self._control, [request], [listener.fileno()])
            reply = await loop.sock_recv(self._control, _REPLY_BYTES)
        if not reply:
            raise self._failure("exited before it forked this server", spec)
        if reply == SPAWN_INSTEAD:
            raise self._failure("runs a thread (a server class started one at import)", spec)
        return ForkedChild(int(reply))

    def _failure(self, problem: str, spec: ServeSpec) -> LaunchError:
        log_path = self.log_path
        if self._early_log is not None and self._early_log.exists():  # it never took its log
            log_path = self._early_log
        tail = log_tail(log_path)
        quoted = f"; last lines of {log_path}:\n{tail}" if tail else ""
        return LaunchError(f"the fork server {problem}{quoted}", server=spec.instance)

    def finish(self) -> None:
        """No more servers: the fork server exits and its children are adopted here. Safe to
        call twice; the subreaper flag is dropped once the fork server is reaped."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._holding:  # every server is forked (or none will be): the store may start
            self._holding = False
            start_gate.release()
        if self.process.poll() is None and not self._asked:
            # Never asked for a server (a run that failed before its launch): it has no
            # children, and waiting would wait for imports it no longer needs (seconds).
            self.process.kill()
            if self._early_log is not None:  # bound, but killed before it moved its log
                self._early_log.unlink(missing_ok=True)
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._subreaper:
            self._subreaper = False
            _adopt_orphans(False)
        if self.early:  # never bound: its temporary log goes with it
            self.log_path.unlink(missing_ok=True)


#: Fork servers started ahead of their launch (:func:`prestart`), by the run's logs folder.
_prestarted: dict[Path, ForkServer] = {}


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    """What decides what an interpreter imports (``PYTHONPATH`` and the other ``PYTHON*``):
    a fork server started ahead serves a launch whose environment agrees on these; every
    other variable reaches each server in its own request."""
    return {key: value for key, value in env.items() if key.startswith("PYTHON")}


def prestart(
    logs: Path, impls: Iterable[tuple[str, str]], env: Mapping[str, str] = os.environ
) -> None:
    """Start the run's fork server now, so it imports the server stack and ``impls`` (``(impl,
    kind)`` of each server to fork) while the driver starts the trace store (the launcher
    takes it over, :func:`take_prestarted`). Nothing where forking is off, there is nothing
    to fork, or one already waits for ``logs``."""
    named = sorted(set(impls))
    early = _take_early(env)
    if not named or not forking_enabled(env) or logs in _prestarted:
        if early is not None:
            early.finish()
        return
    if early is not None and early.run_logs != logs:  # its environment names another folder
        early.finish()
        early = None
    if early is not None:
        try:
            early.bind(logs / "fork-server.log")
        except OSError:
            early.finish()
        else:
            _prestarted[logs] = early
            return
    try:
        _prestarted[logs] = ForkServer(
            {**env, ENV_PRELOAD: json.dumps(named)}, logs / "fork-server.log"
        )
    except OSError:
        return  # the launch spawns each server, and says why


#: The fork server :func:`start_early` started before the run's folder was known.
_early: ForkServer | None = None


def start_early(config: JobConfig, env: Mapping[str, str] = os.environ) -> None:
    """Start the fork server as soon as the config is read, before the driver imports the rest
    of its stack (its imports and the fork server's then share the two cores' time instead of
    following each other); :func:`prestart` binds it to the run's folder once that exists.
    Nothing where :func:`prestart_for` would start nothing, or where the run's folder is not
    named by the config (``run.output_dir``): a generated run id names it only later, and
    the fork server's environment names its run's folder from the start."""
    output_dir = config.run.output_dir
    _start_early(_local_impls(config), None if output_dir is None else Path(output_dir), env)


def start_early_from(read: ConfigRead, env: Mapping[str, str] = os.environ) -> None:
    """:func:`start_early` from the config as read, before it is validated (the driver's
    pydantic import and the validation, about 0.25 s, then overlap the fork server's
    imports too). The run's folder and the server classes are read from the raw mapping;
    where validation then says otherwise (a Ray placement, another folder, an invalid
    config), :func:`prestart` or :func:`discard_early` lets this one go, and each server's
    class is imported when it is asked for anyway."""
    run = read.data.get("run")
    servers = read.data.get("servers")
    if not isinstance(run, dict) or not isinstance(servers, dict):
        return
    if run.get("placement", "local") != "local":
        return
    output_dir = run.get("output_dir")
    impls = sorted(
        {
            (server["impl"], server["kind"])
            for server in servers.values()
            if isinstance(server, dict)
            and isinstance(server.get("impl"), str)
            and isinstance(server.get("kind"), str)
            and server.get("url") is None
        }
    )
    _start_early(
        impls, Path(output_dir) if isinstance(output_dir, str) and output_dir else None, env
    )


def _start_early(
    impls: list[tuple[str, str]], output_dir: Path | None, env: Mapping[str, str]
) -> None:
    global _early
    if _early is not None or not impls or output_dir is None or not forking_enabled(env):
        return
    fd, temporary = tempfile.mkstemp(prefix="rollgym-fork-server-", suffix=".log")
    os.close(fd)
    try:
        _early = ForkServer(
            {**env, ENV_PRELOAD: json.dumps(impls)},
            Path(temporary),
            early_for=output_dir / "logs",
        )
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def _take_early(env: Mapping[str, str]) -> ForkServer | None:
    """The early fork server, if it runs in an interpreter environment that agrees with
    ``env``; else None (one that does not is let go)."""
    global _early
    forks, _early = _early, None
    if forks is not None and (
        _interpreter_env(forks.start_env) != _interpreter_env(env)
        or forks.process.poll() is not None
    ):
        forks.finish()
        return None
    return forks


def discard_early() -> None:
    """Let go of an early fork server no run took (the run failed before its launch)."""
    forks = _take_early(os.environ)
    if forks is not None:
        forks.finish()


def take_prestarted(logs: Path, env: Mapping[str, str]) -> ForkServer | None:
    """The fork server :func:`prestart` started for ``logs`` if it can serve a launch in
    ``env`` (the launch's to finish now); else None, and it is let go."""
    forks = _prestarted.pop(logs, None)
    if forks is None:
        return None
    if (
        _interpreter_env(forks.start_env) != _interpreter_env(env)
        or forks.process.poll() is not None
    ):
        forks.finish()
        return None
    return forks


def discard_prestarted(logs: Path) -> None:
    """Let go of a fork server started for ``logs`` that no launch took (a run that failed
    before its servers started)."""
    forks = _prestarted.pop(logs, None)
    if forks is not None:
        forks.finish()


def prestart_for(config: JobConfig, output_dir: Path) -> None:
    """:func:`prestart` for a job's local servers, before its trace store starts."""
    impls = _local_impls(config)
    if impls:
        prestart(Path(output_dir) / "logs", impls)
    else:
        discard_early()


def _local_impls(config: JobConfig) -> list[tuple[str, str]]:
    """``(impl, kind)`` of each server the local placement forks (none for Ray)."""
    if config.run.placement != "local":
        return []
    return sorted({(s.impl, s.kind) for s in config.servers.values() if s.impl is not None})


def discard_for(output_dir: Path) -> None:
    """:func:`discard_prestarted` of a job's run folder (after its launch, or its failure)."""
    discard_prestarted(Path(output_dir) / "logs")
