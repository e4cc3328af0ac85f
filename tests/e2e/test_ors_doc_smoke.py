"""The ORS example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``guess_ors.py`` (an ORS environment written with openreward) and
``guess_ors.yaml`` are taken from it verbatim into a temporary working directory, with the
rows its ``python -c`` line writes, and run with the ``rollgym`` console script, then
``rollgym traces check``, as a new user would: rollgym serves the environment in openreward's
Python (scripts/test.sh's venv, the ``python`` option's default), the simulated model plays it
through the ``tool_loop`` agent, every rollout completes, the trace contract holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from console_script import doc_block, page_commands, require_script, run_and_check, script_env
from ors_support import require_openreward

require_openreward()

pytestmark = pytest.mark.e2e

PAGE = "environments-from-elsewhere.md"


def test_the_pages_ors_example_runs_verbatim(tmp_path: Path) -> None:
    require_script()
    (tmp_path / "guess_ors.py").write_text(doc_block(PAGE, "# guess_ors.py"))
    (tmp_path / "guess_ors.yaml").write_text(
        doc_block(PAGE, "# guess_ors.yaml, beside guess_ors.py")
    )
    env = script_env()
    block = doc_block(PAGE, "# 20 of the environment's tasks", "bash")
    page_commands(tmp_path, block, "rollgym run guess_ors.yaml", env)
    records = run_and_check(tmp_path, "guess_ors.yaml", env)
    assert len(records) == 20
    for record in records:
        details = record["result"]["details"]
        assert record["reward"] in (0.0, 1.0) and details["tool_calls"] >= 1, details
