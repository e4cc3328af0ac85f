"""Helpers of the ORS tests: environments written with openreward, their sessions counted.

The environments live in ``ors_envs`` and run in openreward's own Python (scripts/test.sh's
venv ``~/.cache/rollgym-openreward/venv``: openreward pins an sse-starlette older than this
Python's). A test serves one with openreward's ``Server`` as a user does (``ors_server``) or
names it for rollgym to serve (``ors_environment: ors_guess:Guess``, with ``OrsJob``, whose
PYTHONPATH has ``ors_envs``). Each environment instance appends ``opened``/``closed`` to the
file ``ORS_SESSIONS`` names: the sessions the server made and tore down, counted from outside.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import foreign_support
from e2e_support import HERE, Job, free_port, served_process

from rollgym.builtins.envs.ors_host import default_python

ENVS = HERE / "ors_envs"
#: The Python the environments run in: scripts/test.sh's openreward venv (where it was made).
PYTHON = default_python()


def require_openreward() -> None:
    """Skip, saying why, where no Python here has openreward (scripts/test.sh makes one)."""
    foreign_support.require_python_with(PYTHON, "import openreward.environments", "openreward")


def child_env(sessions: Path, mode: str = "ok") -> dict[str, str]:
    """What an ORS environment's process is given: where to count, how to behave, and no
    update check (openreward's Server.run asks PyPI for its latest version otherwise)."""
    return {
        "ORS_SESSIONS": str(sessions),
        "GUESS_MODE": mode,
        "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
    }


def _path(pythonpath: str) -> str:
    return os.pathsep.join([str(ENVS), *[p for p in pythonpath.split(os.pathsep) if p]])


class OrsJob(Job):
    """A job whose servers import ``ors_envs`` and count sessions in ``sessions``."""

    mode = "ok"

    @property
    def sessions(self) -> Path:
        return self.root / "ors_sessions.txt"

    def env(self, telemetry: bool = False) -> dict[str, str]:
        env = super().env(telemetry)
        env["PYTHONPATH"] = _path(env["PYTHONPATH"])
        env.update(child_env(self.sessions, self.mode))
        return env


@contextmanager
def ors_server(log: Path, sessions: Path, mode: str = "ok") -> Iterator[str]:
    """``python ors_guess.py <port>`` (openreward's ``Server([Guess]).run()``) in openreward's
    Python on a loopback port, its output in ``log``; yields its base URL."""
    port = free_port()
    env = {**os.environ, **child_env(sessions, mode), "PYTHONPATH": str(ENVS)}
    argv = [PYTHON, str(ENVS / "ors_guess.py"), str(port)]
    with served_process(argv, log, port, "the ORS test server", env=env) as url:
        yield url


def session_counts(sessions: Path) -> dict[str, int]:
    """``{"opened": n, "closed": m}``: ORS environment instances made and torn down."""
    lines = sessions.read_text().split() if sessions.exists() else []
    return {"opened": lines.count("opened"), "closed": lines.count("closed")}


def open_sessions(sessions: Path) -> int:
    counts = session_counts(sessions)
    return counts["opened"] - counts["closed"]


def servers(**where: Any) -> dict[str, Any]:
    """The simulated model, the ORS environment (with its episode ``/run``) and a
    ``tool_loop`` agent on it."""
    return foreign_support.servers("ors", **where)


def rows(n: int) -> list[dict[str, Any]]:
    """Half for the ``tool_loop`` agent, half routed to the environment's own episodes."""
    return foreign_support.half_routed("index", n)
