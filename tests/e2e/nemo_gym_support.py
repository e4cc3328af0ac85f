"""Helpers of the NeMo Gym tests: nemo-gym's interpreter, a real resource server on loopback.

nemo-gym needs Python 3.12 or newer, so it lives in a virtual environment of its own
(``~/.cache/rollgym-nemogym/venv``, made by ``scripts/test.sh``; ``ROLLGYM_NEMOGYM_VENV``
overrides): the tests skip, saying so, where it is missing. The resource server the tests run
themselves (as a user runs one) is ``nemo_gym_notebook.py``, started as NeMo Gym's launcher
starts a server: ``python app.py`` with the config in ``NEMO_GYM_CONFIG_DICT``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2e_support import HERE, free_port, get_json, served_process

VENV = Path(
    os.environ.get("ROLLGYM_NEMOGYM_VENV", str(Path.home() / ".cache/rollgym-nemogym/venv"))
)
PYTHON = VENV / "bin" / "python"
NOTEBOOK = HERE / "nemo_gym_notebook.py"

needs_nemo_gym = pytest.mark.skipif(
    not any(VENV.glob("rollgym-nemogym-*.ok")),
    reason=f"nemo-gym's venv is missing ({VENV}): scripts/test.sh makes it",
)


def notebook_rows(n: int) -> list[dict[str, object]]:
    """NeMo Gym dataset rows for the notebook: a Responses API request and the secret."""
    tools = [
        {
            "type": "function",
            "name": "note",
            "description": "Keep a line in the notebook.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
            "strict": True,
        },
        {
            "type": "function",
            "name": "reveal",
            "description": "Tell the secret of this notebook.",
            "parameters": {"type": "object", "properties": {}, "required": []},
            "strict": True,
        },
    ]
    return [
        {
            "responses_create_params": {
                "input": [
                    {"role": "developer", "content": "You keep a notebook."},
                    {"role": "user", "content": "What is the secret?"},
                ],
                "tools": tools,
            },
            "secret": f"s{i:04d}",
        }
        for i in range(n)
    ]


def config_env(name: str, port: int) -> dict[str, str]:
    """What NeMo Gym's launcher gives a resource server's process."""
    config = {
        "head_server": {"host": "127.0.0.1", "port": 9},
        "dry_run": False,
        name: {
            "resources_servers": {
                "notebook": {"entrypoint": "app.py", "host": "127.0.0.1", "port": port}
            }
        },
    }
    return {"NEMO_GYM_CONFIG_DICT": json.dumps(config), "NEMO_GYM_CONFIG_PATH": name}


@contextmanager
def notebook_server(log: Path, mode: str = "ok") -> Iterator[str]:
    """The notebook resource server in a process of its own; yields its base URL."""
    port = free_port()
    env = {**os.environ, **config_env("notebook", port), "NOTEBOOK_MODE": mode}
    argv = [str(PYTHON), NOTEBOOK.name]
    with served_process(argv, log, port, "the notebook resource server", cwd=HERE, env=env) as url:
        yield url


def session_counts(url: str) -> dict[str, int]:
    """``{"seeded", "closed", "verified", "open"}`` as the resource server counts them."""
    counts: dict[str, int] = get_json(url + "/test/sessions")
    return counts
