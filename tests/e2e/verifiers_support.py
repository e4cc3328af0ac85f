"""Job folders for environments written with verifiers (``tests/e2e/verifiers_envs``).

Their driver and servers import the environments from ``verifiers_envs`` and not from
``tests/e2e`` itself: that folder's ``agents.py`` (the misbehaving test agents) would shadow
the ``agents`` package (openai-agents) that verifiers' ``ToolEnv`` imports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e_support import HERE, Job
from foreign_support import require_python_with
from telemetry_helpers import TracedJob

from rollgym.builtins.envs.verifiers_env import default_python

ENVS = HERE / "verifiers_envs"
#: The Python the environments run in: scripts/test.sh's verifiers venv (where it was made).
PYTHON = default_python()


def require_verifiers() -> None:
    """Skip, saying why, where no Python here has verifiers (scripts/test.sh makes one)."""
    require_python_with(PYTHON, "import verifiers; verifiers.ToolEnv", "verifiers")


def _path(pythonpath: str) -> str:
    kept = [p for p in pythonpath.split(os.pathsep) if p and Path(p).resolve() != HERE]
    return os.pathsep.join([str(ENVS), *kept])


class VerifiersJob(Job):
    def env(self, telemetry: bool = False) -> dict[str, str]:
        env = super().env(telemetry)
        env["PYTHONPATH"] = _path(env["PYTHONPATH"])
        return env


class TracedVerifiersJob(TracedJob):
    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:  # type: ignore[override]
        env = super().env(extra)
        env["PYTHONPATH"] = _path(env["PYTHONPATH"])
        return env


def verifiers_env(target: str, **options: Any) -> dict[str, Any]:
    """An ``impl: verifiers`` environment server on ``target``, playing against ``policy``."""
    return {
        "kind": "environment",
        "impl": "verifiers",
        "verifiers_environment": target,
        "model": "policy",
        **options,
    }


def routed(taskset: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` rows naming examples ``start..`` of the environment routed as ``taskset``."""
    return [{"task_id": {"taskset": taskset, "task_id": i}} for i in range(start, start + n)]
