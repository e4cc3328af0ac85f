"""The OpenEnv example of docs/environments-from-elsewhere.md, run exactly as the page says.

The page's ``guess_env.py`` (an OpenEnv environment written with openenv-core) and
``guess.yaml`` are taken from it verbatim into a temporary working directory, with the rows
its ``python -c`` line writes, and run with the ``rollgym`` console script, then ``rollgym
traces check``, as a new user would: the simulated model plays the OpenEnv environment
through the ``tool_loop`` agent, every rollout completes, the trace contract holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from console_script import doc_block, page_commands, require_script, run_and_check, script_env

pytest.importorskip(
    "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
)

pytestmark = pytest.mark.e2e

PAGE = "environments-from-elsewhere.md"


def test_the_pages_openenv_example_runs_verbatim(tmp_path: Path) -> None:
    require_script()
    (tmp_path / "guess_env.py").write_text(doc_block(PAGE, "# guess_env.py"))
    (tmp_path / "guess.yaml").write_text(doc_block(PAGE, "# guess.yaml, beside guess_env.py"))
    env = script_env()
    page_commands(tmp_path, doc_block(PAGE, "python -c", "bash"), "rollgym run guess.yaml", env)
    records = run_and_check(tmp_path, "guess.yaml", env)
    assert len(records) == 20
    assert all(r["reward"] in (0.0, 1.0) and r["result"]["details"]["steps"] == 1 for r in records)
