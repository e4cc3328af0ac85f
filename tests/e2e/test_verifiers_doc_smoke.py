"""The verifiers example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``capitals.py`` (a ``vf.ToolEnv`` written with verifiers) and ``capitals.yaml`` are
taken from it verbatim into a temporary working directory, with the rows its ``python -c`` line
writes, and run with the ``rollgym`` console script, then ``rollgym traces check``, as a new
user would: the simulated model plays the environment's own rollouts (calling its tool), every
rollout completes with the rubric's reward, the trace contract holds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from verifiers_support import require_verifiers

require_verifiers()

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "rollgym"
DOC = Path(__file__).resolve().parents[2] / "docs" / "environments-from-elsewhere.md"


def _block(starting: str, language: str = "python|yaml|bash") -> str:
    """The page's one fenced code block whose first line is ``starting``."""
    blocks = re.findall(rf"```(?:{language})\n(.*?)```", DOC.read_text(), re.S)
    found = [b for b in blocks if b.startswith(starting)]
    assert len(found) == 1, f"{DOC.name}: {len(found)} blocks start with {starting!r}"
    return found[0]


def test_the_pages_verifiers_example_runs_verbatim(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    (tmp_path / "capitals.py").write_text(_block("# capitals.py"))
    (tmp_path / "capitals.yaml").write_text(_block("# capitals.yaml, beside capitals.py"))
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(src))
    _, rows, run = _block("# 20 rows over the 4 examples", "bash").strip().splitlines()
    subprocess.run(rows, shell=True, cwd=tmp_path, check=True, env=env)  # noqa: S602 (the page's own line)
    assert run == "rollgym run capitals.yaml"
    for command in (["run", "capitals.yaml", "--no-table"], ["traces", "check", "out"]):
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
    # the simulated model (right most of the time by default) called the tool in every rollout
    assert all(r["reward"] in (0.0, 1.0) and r["result"]["tool_calls"] == 1 for r in records)
    assert any(r["reward"] == 1.0 for r in records)
