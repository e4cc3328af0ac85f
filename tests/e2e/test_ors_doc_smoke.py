"""The ORS example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``guess_ors.py`` (an ORS environment written with openreward) and
``guess_ors.yaml`` are taken from it verbatim into a temporary working directory, with the
rows its ``python -c`` line writes, and run with the ``rollgym`` console script, then
``rollgym traces check``, as a new user would: rollgym serves the environment in openreward's
Python (scripts/test.sh's venv, the ``python`` option's default), the simulated model plays it
through the ``tool_loop`` agent, every rollout completes, the trace contract holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from ors_support import require_openreward
from test_openenv_doc_smoke import _block

require_openreward()

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "rollgym"


def test_the_pages_ors_example_runs_verbatim(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    (tmp_path / "guess_ors.py").write_text(_block("# guess_ors.py"))
    (tmp_path / "guess_ors.yaml").write_text(_block("# guess_ors.yaml, beside guess_ors.py"))
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(src))
    _, rows, run = _block("# 20 of the environment's tasks", "bash").strip().splitlines()
    subprocess.run(rows, shell=True, cwd=tmp_path, check=True, env=env)  # noqa: S602 (the page's own line)
    assert run == "rollgym run guess_ors.yaml"
    for command in (["run", "guess_ors.yaml", "--no-table"], ["traces", "check", "out"]):
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
    for record in records:
        details = record["result"]["details"]
        assert record["reward"] in (0.0, 1.0) and details["tool_calls"] >= 1, details
