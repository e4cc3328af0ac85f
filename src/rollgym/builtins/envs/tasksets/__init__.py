"""The task sets shipped with rollgym: ``code.json`` (Python problems) and ``terminal.json``
(shell tasks), written for rollgym. Each task carries its reference solution (``solution`` or
``commands``) and a plausible ``wrong`` attempt, used by the simulated model and by the tests
that prove every reference passes and every wrong attempt fails."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_taskset(name: str) -> dict[str, dict[str, Any]]:
    """A shipped task set by task id (``name``: ``code`` or ``terminal``)."""
    text = resources.files(__package__).joinpath(f"{name}.json").read_text()
    return {task["id"]: task for task in json.loads(text)}
