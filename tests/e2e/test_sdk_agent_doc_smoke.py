"""The SDK agent of docs/writing-an-agent.md, smoke-tested exactly as the page says.

The page's ``sdk_agents.py`` and ``smoke.yaml`` are taken from it verbatim, written to a
temporary working directory with the rows its ``printf`` line makes, and run with the
``rollgym`` console script (``rollgym run smoke.yaml``, then ``rollgym traces check out``),
as a new user would: the official OpenAI SDK against the simulated model, every reward 1.0,
the trace contract holding.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "rollgym"
DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-an-agent.md"


def _block(starting: str) -> str:
    """The page's one fenced code block whose first line is ``starting``."""
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", DOC.read_text(), re.S)
    found = [b for b in blocks if b.startswith(starting)]
    assert len(found) == 1, f"{DOC.name}: {len(found)} blocks start with {starting!r}"
    return found[0]


def test_the_pages_sdk_agent_smoke_test_runs_verbatim(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    (tmp_path / "sdk_agents.py").write_text(_block("# sdk_agents.py"))
    (tmp_path / "smoke.yaml").write_text(_block("# smoke.yaml, beside sdk_agents.py"))
    printf = re.search(r"^\$ printf '(.*)' > rows\.jsonl$", DOC.read_text(), re.M)
    assert printf is not None, f"{DOC.name}: no printf line writing rows.jsonl"
    (tmp_path / "rows.jsonl").write_text(printf.group(1).replace("\\n", "\n"))
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(src))
    for command in (["run", "smoke.yaml", "--no-table"], ["traces", "check", "out"]):
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
    assert len(records) == 2
    assert all(r["reward"] == 1.0 and r["usage"]["model_calls"] == 1 for r in records), records
