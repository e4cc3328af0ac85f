"""The NeMo Gym example of docs/environments-from-elsewhere.md, run as the page says.

The page's ``word_server.py`` (a resource server written with nemo-gym's base classes) and
``word.yaml`` are taken from it verbatim into a temporary working directory (only the
``python:`` line pointed at the suite's nemo-gym venv instead of the page's), with the rows its
``python -c`` line writes, and run with the ``rollgym`` console script, then ``rollgym traces
check``: rollgym starts the resource server, the simulated model plays it through the
``tool_loop`` agent (both tools, then an answer), every rollout completes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from nemo_gym_support import PYTHON, needs_nemo_gym

pytestmark = [pytest.mark.e2e, needs_nemo_gym]

SCRIPT = Path(sys.executable).parent / "rollgym"
DOC = Path(__file__).resolve().parents[2] / "docs" / "environments-from-elsewhere.md"
PAGE_PYTHON = "python: nemo-gym-venv/bin/python"


def _block(starting: str, language: str = "python|yaml|bash") -> str:
    """The page's one fenced code block whose first line is ``starting``."""
    blocks = re.findall(rf"```(?:{language})\n(.*?)```", DOC.read_text(), re.S)
    found = [b for b in blocks if b.startswith(starting)]
    assert len(found) == 1, f"{DOC.name}: {len(found)} blocks start with {starting!r}"
    return found[0]


def test_the_pages_nemo_gym_example_runs_verbatim(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    (tmp_path / "word_server.py").write_text(_block("# word_server.py"))
    config = _block("# word.yaml, beside word_server.py")
    assert PAGE_PYTHON in config
    (tmp_path / "word.yaml").write_text(config.replace(PAGE_PYTHON, f"python: {PYTHON}"))
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(src))
    rows, run = _block("python3 -c 'import json; tools", "bash").strip().splitlines()
    subprocess.run(rows, shell=True, cwd=tmp_path, check=True, env=env)  # noqa: S602 (the page's own line)
    assert run == "rollgym run word.yaml"
    for command in (["run", "word.yaml", "--no-table"], ["traces", "check", "out"]):
        proc = subprocess.run(
            [str(SCRIPT), *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [
        orjson.loads(line)
        for line in (tmp_path / "out" / "rollouts.jsonl").read_bytes().splitlines()
    ]
    assert len(records) == 20
    # the simulated model answers the last tool's output (or, a wrong rollout, that it does
    # not know), never the word: every reward is the server's 0
    assert {r["reward"] for r in records} == {0.0}
    looked = [r["result"] for r in records if '"letter"' in r["result"]["answer"]]
    assert looked, records[0]
    assert all(result["details"]["tool_calls"] == 2 for result in looked)  # length, letter
    assert (tmp_path / "out" / "logs" / "word.nemo_gym.log").exists()
