"""The OpenEnv example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``guess_env.py`` (an OpenEnv environment written with openenv-core) and
``guess.yaml`` are taken from it verbatim into a temporary working directory, with the rows
its ``python -c`` line writes, and run with the ``rollgym`` console script, then ``rollgym
traces check``, as a new user would: the simulated model plays the OpenEnv environment
through the ``tool_loop`` agent, every rollout completes, the trace contract holds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytest.importorskip(
    "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
)

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "rollgym"
DOC = Path(__file__).resolve().parents[2] / "docs" / "environments-from-elsewhere.md"


def _block(starting: str, language: str = "python|yaml|bash") -> str:
    """The page's one fenced code block whose first line is ``starting``."""
    blocks = re.findall(rf"```(?:{language})\n(.*?)```", DOC.read_text(), re.S)
    found = [b for b in blocks if b.startswith(starting)]
    assert len(found) == 1, f"{DOC.name}: {len(found)} blocks start with {starting!r}"
    return found[0]


def test_the_pages_openenv_example_runs_verbatim(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    (tmp_path / "guess_env.py").write_text(_block("# guess_env.py"))
    (tmp_path / "guess.yaml").write_text(_block("# guess.yaml, beside guess_env.py"))
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(src))
    rows, run = _block("python -c", "bash").strip().splitlines()
    subprocess.run(rows, shell=True, cwd=tmp_path, check=True, env=env)  # noqa: S602 (the page's own line)
    assert run == "rollgym run guess.yaml"
    for command in (["run", "guess.yaml", "--no-table"], ["traces", "check", "out"]):
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
    assert all(r["reward"] in (0.0, 1.0) and r["result"]["details"]["steps"] == 1 for r in records)
