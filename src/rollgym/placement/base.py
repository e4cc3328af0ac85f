"""The one interface every placement implements (local processes, Ray actors)."""

from __future__ import annotations

from typing import Protocol

import aiohttp

from rollgym.placement.local import ServerProcess
from rollgym.servers.spec import ServeSpec


class Placement(Protocol):
    """Start servers somewhere, know their URLs, stop them for sure."""

    async def start(
        self, spec: ServeSpec, *, session: aiohttp.ClientSession, timeout_s: float
    ) -> str:
        """Place one server; its base URL once ``GET /health`` answers."""
        ...

    def exited(self) -> tuple[str, ServerProcess] | None:
        """A healthy server whose process has exited since (None: none, or not watchable)."""
        ...

    async def stop(self, grace_s: float) -> None:
        """Stop every server gracefully (each flushes its telemetry), up to ``grace_s``."""
        ...

    def close(self) -> None:
        """Kill whatever is left and release the placement: the last resort, no loop needed."""
        ...
