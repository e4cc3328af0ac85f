"""One sandbox: a private work directory that commands run in, one ``bwrap`` per exec.

Files persist in the work directory between execs of the same sandbox (a terminal task's
state); processes do not: when an exec's command ends, its pid namespace ends with it, so
nothing it started in the background (a daemon, a zombie, a fork bomb's children) outlives
the exec. Every exec is a ``gym.sandbox.exec`` span in the calling rollout's trace, and its
seconds join the calling request's ``Server-Timing`` (:mod:`rollgym.server_timing`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import rollgym.server_timing as server_timing
from rollgym.sandbox._bwrap import Launch, bwrap_launch, sandbox_owner
from rollgym.sandbox._disk import SandboxDisk
from rollgym.sandbox._files import write_inside
from rollgym.sandbox._process import run_exec
from rollgym.sandbox.limits import LIMIT_DISK, ExecResult, SandboxLimits
from rollgym.telemetry.groups import gate

#: How a C library reports ENOSPC, the error of a write past the quota.
_ENOSPC = os.strerror(errno.ENOSPC)


@dataclass(frozen=True)
class ExecHost:
    """What a sandbox's execs need from the pool that made it, and nothing more: the
    threads they run on, the default limits, the pool's cgroup and where each result is
    counted. The pool builds one per sandbox, so this module never imports the pool."""

    executor: Executor
    limits: SandboxLimits
    cgroup: Path | None
    record_exec: Callable[[ExecResult], None]


class Sandbox:
    """A sandbox handed out by a :class:`~rollgym.sandbox.pool.SandboxPool`."""

    def __init__(self, host: ExecHost, sandbox_id: str, disk: SandboxDisk) -> None:
        self.host = host
        self.sandbox_id = sandbox_id
        #: Its writable directories, bounded by the disk quota (see ``_disk``).
        self.disk = disk
        #: The host directory that is ``/work`` inside.
        self.work_dir: Path = disk.work
        #: The rollout this sandbox serves (set when acquired), for its spans.
        self.rollout_id: str | None = None
        self.destroyed = False
        self._execs = 0

    def __repr__(self) -> str:
        return f"Sandbox({self.sandbox_id!r}, rollout={self.rollout_id!r})"

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Create files in the work directory (relative paths, no ``..``), owned by the
        sandbox user so commands can change them. ValueError names a bad path. Links the
        sandbox left are never followed (see ``_files``)."""
        owner = sandbox_owner()
        for name, content in files.items():
            parts = self._parts(name)
            data = content.encode() if isinstance(content, str) else content
            write_inside(self.work_dir, parts, data, owner, name)

    def _parts(self, name: str) -> tuple[str, ...]:
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ValueError(f"file path {name!r} must be relative to the work directory")
        return relative.parts

    async def exec(
        self,
        command: list[str] | str,
        *,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> ExecResult:
        """Run ``command`` (an argv, or a string for ``sh -c``) in the work directory.

        The program's failures (non-zero exit, a crash, a limit, a refused escape) come back
        in the :class:`ExecResult`; only misuse (a destroyed sandbox, a bad file path) raises.
        """
        if self.destroyed:
            raise RuntimeError(f"sandbox {self.sandbox_id} was destroyed")
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        for name in files or {}:
            self._parts(name)  # a bad path is misuse: raised before anything runs
        data = stdin.encode() if isinstance(stdin, str) else stdin
        effective = limits or self.host.limits
        started = time.perf_counter()
        try:
            if gate.sandbox:
                from rollgym.telemetry import spans

                name = argv[0] if isinstance(command, list) else "sh"
                with spans.sandbox_exec_span(self.rollout_id, self.sandbox_id, name) as span:
                    result = await self._run(argv, data, effective, files)
                    spans.record_sandbox_exec(span, result)
                    return result
            return await self._run(argv, data, effective, files)
        finally:
            # What the caller waited (a free worker thread included): the request's
            # Server-Timing carries it to the rollout's usage (sandbox_s).
            server_timing.note(server_timing.SANDBOX, time.perf_counter() - started)

    async def _run(
        self,
        argv: list[str],
        stdin: bytes | None,
        limits: SandboxLimits,
        files: Mapping[str, str | bytes] | None,
    ) -> ExecResult:
        if files:
            try:
                self.write_files(files)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                result = _files_refused(files)  # the command's earlier writes filled it
                self.host.record_exec(result)
                return result
        self._execs += 1
        number = self._execs
        name = f"{self.sandbox_id}.{number}"
        loop = asyncio.get_running_loop()
        launch = bwrap_launch(self.disk, self.sandbox_id, limits, argv, name, number)
        result = await loop.run_in_executor(
            self.host.executor, self._exec_blocking, launch, stdin, limits, name, number
        )
        self.host.record_exec(result)
        return result

    def _exec_blocking(
        self, launch: Launch, stdin: bytes | None, limits: SandboxLimits, name: str, number: int
    ) -> ExecResult:
        """Run the exec in its own scratch directories, then see whether its writes reached
        the quota and remove them (on the worker thread: all of it touches the filesystem)."""
        try:
            full_before = self.disk.is_full()
            self.disk.make_scratch(number)
            result = run_exec(launch, stdin, limits, self.host.cgroup, name)
            if result.limit is None and _hit_quota(self.disk, full_before, result):
                result = dataclasses.replace(result, limit=LIMIT_DISK)
            return result
        finally:
            self.disk.drop_scratch(number)

    def remove_files(self) -> None:
        """Delete the work directory and its tmpfs (blocking; the pool calls it on a
        worker thread)."""
        self.disk.remove()


def _hit_quota(disk: SandboxDisk, full_before: bool, result: ExecResult) -> bool:
    """Whether this exec ran into the quota: it used the last of it, or, on a sandbox already
    full, a write of it was refused (the kernel's ENOSPC message in its output)."""
    if not disk.is_full():
        return False
    return not full_before or _ENOSPC in result.stderr or _ENOSPC in result.stdout


def _files_refused(files: Mapping[str, str | bytes]) -> ExecResult:
    """The result of an exec that could not start: the quota had no room for its files."""
    names = ", ".join(sorted(files))
    message = f"the sandbox's disk quota is used up: could not write {names} ({_ENOSPC})\n"
    return ExecResult(
        exit_code=1,
        stdout="",
        stderr=message,
        wall_s=0.0,
        cpu_s=0.0,
        timed_out=False,
        killed=False,
        limit=LIMIT_DISK,
        stdout_bytes=0,
        stderr_bytes=len(message),
        truncated=False,
    )
