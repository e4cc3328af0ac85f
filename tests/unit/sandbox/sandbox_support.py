"""Helpers of the sandbox tests: the skip marker, small limits, a process finder."""

from __future__ import annotations

import pytest

from procs import each_process
from rollgym.sandbox import SandboxLimits, unavailable_reason

#: Small limits so every abuse ends quickly, even on a saturated machine.
LIMITS = SandboxLimits(wall_s=20, cpu_s=2, memory_mb=256, processes=32, output_bytes=1 << 16)


requires_sandbox = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"no sandbox here: {unavailable_reason()}"
)


def processes_of(sandbox_id: str) -> list[int]:
    """Live processes started in a sandbox (they carry its id in their environment)."""
    marker = f"_ROLLGYM_SANDBOX_ID={sandbox_id}".encode()
    return [pid for pid, (environ,) in each_process("environ") if marker in environ.split(b"\0")]
