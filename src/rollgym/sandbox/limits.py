"""What a sandboxed command may use, and what running it cost.

:class:`SandboxLimits` is a frozen pydantic model so an environment can take it as an option
(``limits: {wall_s: 5, memory_mb: 512}``) validated once with the config. :class:`ExecResult` is
what every exec returns: a failure of the sandboxed program (crash, limit hit, escape refused)
is data in the result, never an exception of the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Per-exec limits; each is enforced by the kernel (rlimits) or by the caller (wall time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_s: float = Field(10.0, gt=0, description="Wall-clock seconds before the exec is killed.")
    cpu_s: int = Field(5, ge=1, description="CPU seconds (RLIMIT_CPU) before the kernel kills it.")
    memory_mb: int = Field(
        1024, ge=16, description="Address space (RLIMIT_AS) in MiB: allocations beyond fail."
    )
    processes: int = Field(
        64, ge=2, description="Processes and threads at once (RLIMIT_NPROC, per sandbox)."
    )
    output_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="stdout + stderr kept per exec; more kills the exec (output limit).",
    )
    file_mb: int = Field(64, ge=1, description="Largest file a command may write (RLIMIT_FSIZE).")
    disk_mb: int = Field(
        64,
        ge=1,
        description=(
            "Disk quota in MiB of a sandbox's writable directories (/work, /tmp, /dev/shm; "
            "a tmpfs each, held in memory): writes past it fail with ENOSPC (disk_quota limit). "
            "Read from the pool's limits when a sandbox is created."
        ),
    )


#: Which limit ended an exec, if any (``ExecResult.limit``).
LIMIT_WALL = "wall"
LIMIT_CPU = "cpu"
LIMIT_OUTPUT = "output"
LIMIT_DISK = "disk_quota"


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One exec's outcome. ``exit_code`` is the program's status, or 128+N when signal N
    ended it (as a shell reports it); ``killed`` says a signal ended it, ``timed_out`` that the
    wall or CPU limit did, ``limit`` which limit (``wall``, ``cpu``, ``output``,
    ``disk_quota``) if any. The disk quota does not kill: writes past it fail, and the
    program decides what to do about it."""

    exit_code: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    timed_out: bool
    killed: bool
    limit: str | None
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.killed

    def describe(self) -> str:
        """One line for a tool answer: the exit status and why it ended, if a limit did."""
        parts = [f"exit code {self.exit_code}"]
        if self.limit == LIMIT_DISK:
            parts.append("disk quota reached (writes past it failed: No space left on device)")
        elif self.limit is not None:
            parts.append(f"stopped by the {self.limit} limit")
        elif self.killed:
            parts.append("killed by a signal")
        if self.truncated:
            parts.append("output truncated")
        return ", ".join(parts)
