"""Watch the launched servers during the run: report a death at once, restart it.

Without a watch a server killed mid-run is invisible: every later rollout to it is tried
``max_attempts`` times against a closed port and fails as ``connection_error``, and the run
still ends ``completed``. The supervisor looks at each launched replica (cheap: a local
process's ``poll()``, a Ray actor's death as Ray reported it), and when one has ended it

1. prints one line naming the server, how it ended and the last lines of its log;
2. takes it out of rotation: an attempt for it (or for an agent that calls it) waits for it
   to come back instead of burning attempts on a closed port;
3. restarts it on the same port (the servers that call it keep their URLs), at most
   ``servers.<name>.restart`` times over the run; with no restart left it stays out of
   rotation for good, and attempts that need it fail at once as ``server_down`` (permanent).

Deaths and restarts are counted per replica for ``summary.json``, and with an
:class:`~rollgym.incarnations.IncarnationLog` each process a replica had is written
to ``servers.jsonl`` (start, death, restart), so ``rollgym traces check`` can tell spans lost
with a dead process from a broken trace. The same logic serves both
placements: it sees only :class:`~rollgym.placement.base.PlacedServer` (how a replica ended,
its log) and the placement's ``restart`` (a local process again, or a new Ray actor on the
node and port the dead one had).

Replicas (``servers.<name>.replicas``) are watched one by one (``name``, ``name@1``, ...):
each has its own restart budget and its own entry in ``summary.json``. A server is out of
rotation only while *all* of its replicas are; while one serves, callers' HTTP clients
balance away from the dead one (it refuses connections) and attempts go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from rollgym.child_process import log_tail
from rollgym.errors import (
    ConfigError,
    DispatchError,
    InvariantBroken,
    LaunchError,
    PermanentDispatchError,
)
from rollgym.incarnations import IncarnationLog
from rollgym.placement.base import PlacedServer
from rollgym.printable import printable_lines
from rollgym.servers.spec import instance_name

POLL_S = 0.2
_LOOPBACK = "127.0.0.1"
#: Longest an attempt waits for a restarting server before it is tried anyway.
WAIT_FOR_RESTART_S = 120.0
_TAIL_LINES = 10


class Restarter(Protocol):
    """What the supervisor needs from the launch: the replicas, and a way to place one again."""

    def launched(self) -> Mapping[str, PlacedServer]: ...

    async def restart(self, name: str) -> str: ...


@dataclass
class ServerHealth:
    """One launched server's history over the run (``summary.json`` -> ``servers``)."""

    restart_limit: int
    deaths: int = 0
    restarts: int = 0
    #: Set while the server serves; cleared while it is dead or restarting.
    up: asyncio.Event = field(default_factory=asyncio.Event)
    #: Why it is out of rotation for good (no restart left), else None.
    gone: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"deaths": self.deaths, "restarts": self.restarts, "down": self.gone is not None}


class Supervisor:
    """Watches launched servers; the dispatcher asks it whether a server is in rotation.

    ``dependencies`` maps a server to the servers it calls (an agent -> its model and
    environment), so an attempt for an agent also waits while its model restarts.
    ``report`` prints one line (stderr by default).
    """

    def __init__(
        self,
        restart_limits: Mapping[str, int],
        dependencies: Mapping[str, set[str]],
        report: Callable[[str], None] | None = None,
        replicas: Mapping[str, int] | None = None,
    ) -> None:
        counts = replicas or {}
        #: Told ``(instance, serving)`` when a replica leaves rotation or comes back (the
        #: driver's HTTP client holds a dead replica out until then).
        self.on_rotation: Callable[[str, bool], None] | None = None
        #: Each server's replicas by instance name (``name``, ``name@1``, ...).
        self._instances = {
            name: [instance_name(name, i) for i in range(counts.get(name, 1))]
            for name in restart_limits
        }
        self.health = {
            instance: ServerHealth(limit)
            for name, limit in restart_limits.items()
            for instance in self._instances[name]
        }
        self._needs = {name: _closure(name, dependencies) for name in restart_limits}
        self._report = report or report_to_stderr
        #: Servers out of rotation now; empty while all serve, so the hot path checks one dict.
        self.out_of_rotation: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        #: One recovery task per dead server, so a death is reported while another restarts.
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._restarter: Restarter | None = None
        #: Where each replica's incarnations are recorded (``servers.jsonl``); None: nowhere.
        self.incarnations: IncarnationLog | None = None

    # --- the watch -----------------------------------------------------------------------

    def start(self, restarter: Restarter) -> None:
        """Begin watching the replicas ``restarter`` launched (all healthy now)."""
        self._restarter = restarter
        for name, replica in restarter.launched().items():
            self.health[name].up.set()
            if self.incarnations is not None:
                self.incarnations.started(name, _pid_of(replica), *address_of(replica))
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        """Stop watching (before the launcher stops the servers, so no stop looks like a death)."""
        tasks = [task for task in (self._task, *self._recovering.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._recovering.clear()
        self._restarter = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            self._check(None)

    def note_unreachable(self, server: str) -> None:
        """An attempt for ``server`` just failed transiently: look at its replicas now rather
        than at the next poll, so the retry already waits for the restart."""
        self._check(self._needs.get(server, ()))

    def _check(self, names: Iterable[str] | None) -> None:
        """Take every ended replica (of ``names``, or all) out of rotation and recover it."""
        if self._restarter is None:
            return
        launched = self._restarter.launched()
        watched = (
            launched
            if names is None
            else [i for name in names for i in self._instances.get(name, [name])]
        )
        for name in watched:
            replica = launched.get(name)
            if replica is None or name in self._recovering:
                continue
            status = replica.exit_status()
            if status is None:
                continue
            health = self.health[name]
            health.deaths += 1
            if self.incarnations is not None:
                self.incarnations.died(name, _pid_of(replica), status)
            health.up.clear()
            self.out_of_rotation[name] = f"server {name!r} died ({status})"
            if self.on_rotation is not None:
                self.on_rotation(name, False)
            tail = log_tail(replica.log_path, _TAIL_LINES) if replica.log_path else ""
            quoted = f"; last lines of {replica.log_path}:\n{tail}" if tail else ""
            self._report(f"rollgym: server {name!r} died ({status}){quoted}")
            # An empty context: called from a rollout's attempt, the recovery must not run
            # inside that rollout's trace.
            task = asyncio.get_running_loop().create_task(
                self._recover(name, status), context=contextvars.Context()
            )
            self._recovering[name] = task

    async def _recover(self, name: str, status: str) -> None:
        """Restart while restarts are left; a server with none left stays in ``_recovering``
        (its dead replica is not reported twice)."""
        if self._restarter is None:
            raise InvariantBroken(
                f"server {name!r} died ({status}) under a supervisor with no restarter"
            )
        health = self.health[name]
        while health.restarts < health.restart_limit:
            health.restarts += 1
            self._report(
                f"rollgym: restarting server {name!r} "
                f"(restart {health.restarts} of {health.restart_limit}, servers.{name}.restart)"
            )
            try:
                url = await self._restarter.restart(name)
            except (LaunchError, ConfigError) as exc:  # ConfigError: its start check failed
                self._report(f"rollgym: restart of {name!r} failed: {exc}")
                continue
            replica = self._restarter.launched().get(name)
            if self.incarnations is not None and replica is not None:
                self.incarnations.started(name, _pid_of(replica), *address_of(replica))
            del self.out_of_rotation[name]
            if self.on_rotation is not None:
                self.on_rotation(name, True)
            health.up.set()
            self._report(f"rollgym: server {name!r} is back at {url}")
            del self._recovering[name]
            return
        health.gone = (
            f"server {name!r} is down: it died ({status}) and was not restarted "
            f"(servers.{name}.restart: {health.restart_limit} restart(s), all used)"
        )
        self.out_of_rotation[name] = health.gone
        health.up.set()  # wake the waiters: they fail at once now
        self._report(f"rollgym: {health.gone}; attempts that need it fail as server_down")

    # --- what the dispatcher asks --------------------------------------------------------

    async def wait_in_rotation(self, server: str) -> DispatchError | None:
        """None once ``server`` and everything it calls serve; the error when one is gone.

        A restarting server is waited for (at most :data:`WAIT_FOR_RESTART_S`); a server
        not watched here (given by ``url:``) is always in rotation.
        """
        for name in self._needs.get(server, ()):
            instances = self._instances.get(name, [name])
            if any(instance not in self.out_of_rotation for instance in instances):
                continue  # one replica serves: the HTTP client balances away from the others
            healths = [self.health[instance] for instance in instances]
            if any(health.gone is None for health in healths):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first_up(healths), WAIT_FOR_RESTART_S)
            if all(health.gone is not None for health in healths):
                gone = healths[0].gone
                assert gone is not None
                return PermanentDispatchError(gone, kind="server_down", server=name)
        return None

    def to_json(self) -> dict[str, Any]:
        """``summary.json`` -> ``servers``: per server, deaths, restarts and whether it ended
        down. A server with replicas adds them up (``down``: all of them ended down) and
        lists each under ``replicas``."""
        servers: dict[str, object] = {}
        for name, instances in sorted(self._instances.items()):
            each = {instance: self.health[instance].to_json() for instance in instances}
            if len(instances) == 1:
                servers[name] = each[name]
                continue
            servers[name] = {
                "deaths": sum(entry["deaths"] for entry in each.values()),
                "restarts": sum(entry["restarts"] for entry in each.values()),
                "down": all(entry["down"] for entry in each.values()),
                "replicas": each,
            }
        return servers

    def gone(self) -> list[str]:
        """Why each server that ended the run out of rotation is gone (for the final report)."""
        return [health.gone for health in self.health.values() if health.gone is not None]


def _pid_of(replica: PlacedServer) -> int | None:
    """The replica's process id: a local child's, or the Ray actor's worker process."""
    pid = getattr(replica, "pid", None)
    return pid if isinstance(pid, int) else None


def address_of(replica: PlacedServer) -> tuple[str | None, int | None]:
    """Where ``replica`` listens: a Ray actor knows its URL; a local process announced its
    port in its ready file (it binds loopback)."""
    url = getattr(replica, "url", None)
    if isinstance(url, str) and url:
        parts = urlsplit(url)
        return parts.hostname, parts.port
    try:
        port = int(Path(replica.spec.ready_file).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None, None
    return _LOOPBACK, port


async def _first_up(healths: list[ServerHealth]) -> None:
    """Return once one of ``healths`` is up again (or gone for good: ``up`` is set then too)."""
    waits = [asyncio.ensure_future(health.up.wait()) for health in healths]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _closure(name: str, dependencies: Mapping[str, set[str]]) -> list[str]:
    """``name`` and every server it calls, directly or not (dependencies first)."""
    seen: list[str] = []
    stack = [name]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        stack.extend(sorted(dependencies.get(current, ())))
    return seen[::-1]


def report_to_stderr(line: str) -> None:
    """Print one event of the run (a death, a restart) where the person running it looks; a
    dead server's quoted log lines stay lines, what they hold is escaped (:mod:`rollgym.printable`)."""
    print(printable_lines(line), file=sys.stderr, flush=True)
