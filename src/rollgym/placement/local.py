"""Local placement: each launched server is a child process of the driver on this machine.

Children die with the driver (:mod:`rollgym.child_process`), run in their own session so a
terminal's Ctrl-C reaches only the driver (which then stops them in order), and write their
output to ``logs/<name>.log``, whose last lines are quoted when a server does not come up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from rollgym.child_process import describe_exit, log_tail, spawn_child
from rollgym.errors import LaunchError
from rollgym.forked_child import forking_enabled
from rollgym.placement.forked import ForkServer, take_prestarted
from rollgym.placement.health import HealthSession, wait_healthy
from rollgym.placement.reserved import Reservations
from rollgym.servers.spec import ENV_SPEC, ServeSpec
from rollgym.servers.start_checks import forget_problem

_POLL_S = 0.05
log = logging.getLogger(__name__)


class ChildHandle(Protocol):
    """A server's process as the placement handles it: a spawned :class:`subprocess.Popen`
    or a :class:`~rollgym.placement.forked.ForkedChild`."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def send_signal(self, sig: int, /) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class ServerProcess:
    """A server (one replica of it): ``python -m rollgym.servers.server_process`` spawned
    (:meth:`spawn`), or forked by the run's fork server (:meth:`fork`)."""

    def __init__(self, spec: ServeSpec, log_path: Path, popen: ChildHandle) -> None:
        self.spec = spec
        self.log_path = log_path
        self.ready_file = Path(spec.ready_file)
        self.popen = popen

    @classmethod
    def spawn(
        cls,
        spec: ServeSpec,
        env: Mapping[str, str],
        log_path: Path,
        listener: socket.socket | None = None,
    ) -> ServerProcess:
        """A new interpreter for the server. ``listener``: a socket bound for it in advance
        (its URL already handed out); the process serves on it, and this process's copy is
        closed once the child has it."""
        if listener is not None:
            spec = dataclasses.replace(spec, listen_fd=listener.fileno())
        Path(spec.ready_file).unlink(missing_ok=True)
        forget_problem(spec.ready_file)  # an earlier start's, which this start may not repeat
        try:
            popen = spawn_child(
                [sys.executable, "-m", "rollgym.servers.server_process"],
                env={**os.environ, **env, ENV_SPEC: spec.to_env()},
                log_path=log_path,
                new_session=True,
                pass_fds=() if listener is None else (listener.fileno(),),
            )
        finally:
            if listener is not None:
                listener.close()
        return cls(spec, log_path, popen)

    @classmethod
    async def fork(
        cls,
        forks: ForkServer,
        spec: ServeSpec,
        env: Mapping[str, str],
        log_path: Path,
        listener: socket.socket,
    ) -> ServerProcess:
        """The server forked by the run's fork server, serving on ``listener`` (closed here
        once the server has it; left open when the fork server failed, to spawn it instead)."""
        Path(spec.ready_file).unlink(missing_ok=True)
        forget_problem(spec.ready_file)  # an earlier start's, which this start may not repeat
        log_path.parent.mkdir(parents=True, exist_ok=True)
        child = await forks.fork(spec, {**os.environ, **env}, log_path, listener)
        listener.close()
        return cls(spec, log_path, child)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_status(self) -> str | None:
        """None while the process runs, else how it ended (``exit code 1``, ``killed by ...``)."""
        code = self.popen.poll()
        return None if code is None else describe_exit(code)

    def failure(self, problem: str) -> LaunchError:
        tail = log_tail(self.log_path)
        quoted = (
            f"; last lines of {self.log_path}:\n{tail}" if tail else f"; {self.log_path} is empty"
        )
        return LaunchError(problem + quoted, server=self.spec.instance)

    async def wait_healthy(self, session: HealthSession, timeout_s: float) -> str:
        # The process announces its port in a ready file once its app is built (a reserved
        # one too: asking before would only time requests out in the backlog while it
        # imports); the first GET /health then waits in the backlog until it serves.
        return await wait_healthy(
            None,
            session=session,
            deadline=time.monotonic() + timeout_s,
            ready_file=self.ready_file,
            process=self.popen,
            failure=self.failure,
            server=self.spec.name,
        )

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL. Safe to call twice."""
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.popen.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(_POLL_S)
        self.kill_now()

    def kill_now(self) -> None:
        """SIGKILL if still running, and reap: the last resort, usable without a loop."""
        if self.popen.poll() is None:
            self._signal(signal.SIGKILL)
            self.popen.wait()
        self.ready_file.unlink(missing_ok=True)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)


class LocalPlacement:
    """Servers as local processes: start, restart on the same port, stop, kill.

    The :class:`~rollgym.placement.supervisor.Supervisor` watches :meth:`launched` and
    calls :meth:`restart`, as for the Ray placement.
    """

    def __init__(self, env: Mapping[str, str], logs: Path) -> None:
        self.env = dict(env)
        self.logs = logs
        self.processes: list[ServerProcess] = []
        #: The current process of each launched server (a restart replaces its entry).
        self.by_name: dict[str, ServerProcess] = {}
        self.urls: dict[str, str] = {}
        self.reservations = Reservations()
        #: Forks the reserved servers (started with the first reservation); None: spawn each.
        self.forks: ForkServer | None = None
        self._use_forks = forking_enabled()
        self._forking = 0

    def reserve(self, instance: str) -> str:
        """Bind instance's socket now; its URL (known before the process starts). The first
        starts the fork server, which imports the server stack meanwhile."""
        url = self.reservations.reserve(instance)
        if self._use_forks and self.forks is None:
            start_env = {**os.environ, **self.env}
            try:
                self.forks = take_prestarted(self.logs, start_env) or ForkServer(
                    start_env, self.logs / "fork-server.log"
                )
            except OSError as exc:
                log.warning("no fork server (%s); spawning each server", exc)
                self._use_forks = False
        return url

    async def start(self, spec: ServeSpec, *, session: HealthSession, timeout_s: float) -> str:
        """Start one server; its base URL once ``GET /health`` answers."""
        listener = self.reservations.take(spec.instance)
        log_path = self.logs / f"{spec.instance}.log"
        if listener is not None and self.forks is not None:
            process = await self._fork(spec, log_path, listener)
        else:
            process = ServerProcess.spawn(spec, self.env, log_path, listener)
        self.processes.append(process)
        self.by_name[spec.instance] = process
        url = await process.wait_healthy(session, timeout_s)
        self.urls[spec.instance] = url
        return url

    async def _fork(
        self, spec: ServeSpec, log_path: Path, listener: socket.socket
    ) -> ServerProcess:
        """Fork the server; once no reserved server is left to fork, let the fork server go."""
        assert self.forks is not None
        self._forking += 1
        try:
            return await ServerProcess.fork(self.forks, spec, self.env, log_path, listener)
        except LaunchError as exc:  # the fork server is gone: spawn this one (and the rest)
            log.warning("%s; spawning %s instead", exc, spec.instance)
            return ServerProcess.spawn(spec, self.env, log_path, listener)
        finally:
            self._forking -= 1
            if self._forking == 0 and not self.reservations.pending():
                self.forks.finish()

    def launched(self) -> dict[str, ServerProcess]:
        """``{instance: its current process}`` (``name``, or ``name@<i>`` for replica i) of
        the servers that have been healthy."""
        return {name: process for name, process in self.by_name.items() if name in self.urls}

    async def restart(self, name: str, timeout_s: float) -> str:
        """Start instance ``name`` again on the port it had; its URL is unchanged."""
        old = self.by_name[name]
        port = int(self.urls[name].rsplit(":", 1)[1])
        spec = dataclasses.replace(old.spec, port=port, listen_fd=None)
        process = ServerProcess.spawn(spec, self.env, old.log_path)
        self.processes.append(process)
        self.by_name[name] = process
        async with HealthSession() as session:
            return await process.wait_healthy(session, timeout_s)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM every process concurrently, SIGKILL what is left after ``grace_s``."""
        await asyncio.gather(*(process.stop(grace_s) for process in self.processes))

    def kill_now(self) -> None:
        for process in self.processes:
            process.kill_now()

    def close(self) -> None:
        self.reservations.close()
        if self.forks is not None:
            self.forks.finish()
        self.kill_now()


__all__ = ["LocalPlacement", "ServerProcess", "describe_exit"]
