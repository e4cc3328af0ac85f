"""The verifiers worker process, from the environment server's side: start, talk, stop.

:func:`start_worker` starts ``verifiers_worker.py`` (by its file, so the worker's Python needs
verifiers, not rollgym) with the Python ``verifiers_python`` names and waits for its first
line: ``ready``, or ``problem`` (the environment did not load), which becomes a
:class:`SetupProblem`: one line, and the run ends before its first rollout. After that
:class:`WorkerChannel` carries JSON lines both ways on the worker's stdin and stdout; the
worker's stderr is the server's (its log). The worker ends when its stdin closes: when the
server stops, and when the server dies (``kill -9`` of the driver) too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from rollgym.servers import SetupProblem

WORKER = Path(__file__).with_name("verifiers_worker.py")
#: An event line may carry a whole conversation (a model call's body).
LINE_LIMIT = 1 << 26


def start_worker(
    python: str, target: str, args: Mapping[str, object], *, timeout_s: float, cwd: str
) -> WorkerChannel:
    """The worker, its environment loaded, or a SetupProblem saying why not."""
    if not Path(python).exists():
        raise SetupProblem(
            "verifiers_python",
            f"no Python at {python!r}: make verifiers' venv with scripts/test.sh, or name a "
            "Python that has verifiers installed",
        )
    try:
        encoded = json.dumps(dict(args))
    except (TypeError, ValueError) as exc:
        raise SetupProblem("verifiers_args", f"not JSON: {exc}") from None
    proc = subprocess.Popen(  # noqa: S603 (the configured Python running rollgym's own file)
        [python, str(WORKER), target, encoded],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        cwd=cwd,
    )
    assert proc.stdout is not None
    first = _first_line(proc, timeout_s)
    try:
        event = json.loads(first) if first else None
    except ValueError:
        event = None
    if not isinstance(event, dict) or event.get("op") not in ("ready", "problem"):
        _stop(proc)
        code = proc.returncode
        said = f"exited with status {code}" if code is not None else "answered off-protocol"
        if not first and code is None:
            said = f"did not load within {timeout_s:g} s"
        raise SetupProblem(
            "verifiers_environment",
            f"the verifiers worker ({python}) {said}; its log is the server's",
        )
    if event["op"] == "problem":
        _stop(proc)
        raise SetupProblem(
            str(event.get("key") or "verifiers_environment"), str(event.get("message"))
        )
    return WorkerChannel(proc)


def _first_line(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """The worker's first line, waiting at most ``timeout_s`` (b"" if none came)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    fd = proc.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return b""
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            return b""
        line += chunk
    return line


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class WorkerChannel:
    """JSON lines to and from a started worker (:meth:`connect` once the loop runs)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.WriteTransport | None = None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._proc.stdout is not None and self._proc.stdin is not None
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._proc.stdout
        )
        transport, _ = await loop.connect_write_pipe(asyncio.Protocol, self._proc.stdin)
        self._reader, self._writer = reader, transport

    def send(self, event: Mapping[str, Any]) -> None:
        """Queue one line to the worker (never blocks; dropped once the worker is gone)."""
        if self._writer is None or self._writer.is_closing():
            return
        self._writer.write(json.dumps(event, default=str).encode() + b"\n")

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The worker's events, until it ends."""
        assert self._reader is not None
        while True:
            try:
                line = await self._reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue  # an event too long to be one of ours: skipped
            if not line:
                return
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event

    async def reaped(self, timeout_s: float = 5.0) -> None:
        """Wait (a little) for the worker to exit once its output ended, so :meth:`why_gone`
        can name its exit status."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self._proc.wait), timeout=timeout_s)

    def why_gone(self) -> str:
        code = self._proc.poll()
        return (
            f"the verifiers worker exited (status {code})"
            if code is not None
            else ("the verifiers worker stopped answering")
        )

    async def close(self) -> None:
        """End the worker: its stdin closes, it ends its rollouts and exits (else killed)."""
        if self._writer is not None:
            self._writer.close()
        elif self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self._proc.wait), timeout=10)
        except TimeoutError:
            self._proc.kill()
            await asyncio.to_thread(self._proc.wait)
