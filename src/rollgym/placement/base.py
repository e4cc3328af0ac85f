"""The one interface every placement implements (local processes, Ray actors)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from rollgym.errors import LaunchError
from rollgym.placement.health import HealthSession
from rollgym.servers.spec import ServeSpec


class PlacedServer(Protocol):
    """One placed replica of a server, as the launch and the supervisor watch it.

    A local child process (:class:`~rollgym.placement.local.ServerProcess`) or a Ray actor
    (:class:`~rollgym.placement.ray.ActorReplica`): the supervisor treats both alike.
    """

    @property
    def spec(self) -> ServeSpec: ...

    @property
    def log_path(self) -> Path | None:
        """Its output (quoted when it dies), or None where there is none."""
        ...

    def exit_status(self) -> str | None:
        """None while it runs; once it has ended, how (``exit code 1``, ``killed by SIGKILL``,
        ``its Ray actor died``)."""
        ...

    def failure(self, problem: str) -> LaunchError:
        """A LaunchError naming this replica, quoting the last lines of its log."""
        ...


class Placement(Protocol):
    """Start servers somewhere, know their URLs, watch them, restart one, stop them for sure."""

    def reserve(self, instance: str) -> str | None:
        """The URL instance ``instance`` will have, fixed before it starts; None where the
        placement learns it only once the server runs (then servers start in dependency
        order, each told the URLs of the ones it calls)."""
        ...

    async def start(self, spec: ServeSpec, *, session: HealthSession, timeout_s: float) -> str:
        """Place one server; its base URL once ``GET /health`` answers."""
        ...

    def launched(self) -> Mapping[str, PlacedServer]:
        """``{instance: its current replica}`` (``name``, or ``name@<i>`` for replica i)."""
        ...

    async def restart(self, name: str, timeout_s: float) -> str:
        """Place instance ``name`` again where it was, on the port it had: its URL is unchanged
        (every caller's replica list was fixed at launch)."""
        ...

    async def stop(self, grace_s: float) -> None:
        """Stop every server gracefully (each flushes its telemetry), up to ``grace_s``."""
        ...

    def close(self) -> None:
        """Kill whatever is left and release the placement: the last resort, no loop needed."""
        ...
