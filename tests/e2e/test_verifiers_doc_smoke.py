"""The verifiers example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``capitals.py`` (a ``vf.ToolEnv`` written with verifiers) and ``capitals.yaml`` are
taken from it verbatim into a temporary working directory, with the rows its ``python -c`` line
writes, and run with the ``rollgym`` console script, then ``rollgym traces check``, as a new
user would: the simulated model plays the environment's own rollouts (calling its tool), every
rollout completes with the rubric's reward, the trace contract holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from console_script import doc_block, page_commands, require_script, run_and_check, script_env
from verifiers_support import require_verifiers

require_verifiers()

pytestmark = pytest.mark.e2e

PAGE = "environments-from-elsewhere.md"


def test_the_pages_verifiers_example_runs_verbatim(tmp_path: Path) -> None:
    require_script()
    (tmp_path / "capitals.py").write_text(doc_block(PAGE, "# capitals.py"))
    (tmp_path / "capitals.yaml").write_text(doc_block(PAGE, "# capitals.yaml, beside capitals.py"))
    env = script_env()
    page_commands(
        tmp_path,
        doc_block(PAGE, "# 20 rows over the 4 examples", "bash"),
        "rollgym run capitals.yaml",
        env,
    )
    records = run_and_check(tmp_path, "capitals.yaml", env)
    assert len(records) == 20
    # the simulated model (right most of the time by default) called the tool in every rollout
    assert all(r["reward"] in (0.0, 1.0) and r["result"]["tool_calls"] == 1 for r in records)
    assert any(r["reward"] == 1.0 for r in records)
