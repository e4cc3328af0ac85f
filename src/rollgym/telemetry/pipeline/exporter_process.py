"""How a recording process starts its span-exporter child (:mod:`.child`).

Forked where that is safe (one thread runs: a server just forked by the fork server, which
already imported the child's modules), else spawned as ``python -m`` :data:`CHILD_MODULE`
with its stdin and stdout piped. Apart from :mod:`.child` so that importing the shipper does
not import the child's encoder and HTTP client in a process that will spawn it.
"""

from __future__ import annotations

import subprocess
import sys
from typing import IO, Protocol

from rollgym.forked_child import can_fork, fork_piped


class ExporterProcess(Protocol):
    """What the shipper uses of its child: a :class:`subprocess.Popen` or a forked
    :class:`~rollgym.forked_child.PipedChild`."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    def send_signal(self, sig: int, /) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


#: The module the spawned child runs (``python -m``).
CHILD_MODULE = "rollgym.telemetry.pipeline.child"


def start_exporter(command: list[str] | None = None) -> ExporterProcess:
    """The exporter child: forked where that is safe, else ``command`` (default: :data:`CHILD_MODULE`
    in a new interpreter) spawned with its stdin and stdout piped."""
    if command is None and can_fork():
        # Imported only to fork: a process that spawns its exporter (the driver, with its
        # threads) never needs the child's modules.
        from rollgym.telemetry.pipeline.child import run

        forked = fork_piped(run)
        if forked is not None:
            return forked
    return subprocess.Popen(
        command or [sys.executable, "-m", CHILD_MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        close_fds=True,
    )
