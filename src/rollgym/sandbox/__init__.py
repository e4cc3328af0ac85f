"""Isolated execution for environments: bubblewrap sandboxes and a warm pool.

An environment that runs model-written code or commands creates one
:class:`SandboxPool` at start-up (which checks that sandboxes work on this machine, else
raises :class:`SandboxUnavailable` naming what to install), takes a :class:`Sandbox` per
rollout with ``acquire``, runs commands with ``Sandbox.exec`` (an :class:`ExecResult` back,
whatever the program did), and gives it back with ``release``. See ``docs/sandbox.md``.
"""

from rollgym.sandbox._bwrap import SandboxUnavailable, check_support, unavailable_reason
from rollgym.sandbox.limits import ExecResult, SandboxLimits
from rollgym.sandbox.pool import PoolStats, SandboxPool
from rollgym.sandbox.sandbox import Sandbox

__all__ = [
    "ExecResult",
    "PoolStats",
    "Sandbox",
    "SandboxLimits",
    "SandboxPool",
    "SandboxUnavailable",
    "check_support",
    "unavailable_reason",
]
