"""The NeMo Gym example of docs/environments-from-elsewhere.md, run as the page says.

The page's ``word_server.py`` (a resource server written with nemo-gym's base classes) and
``word.yaml`` are taken from it verbatim into a temporary working directory (only the
``python:`` line pointed at the suite's nemo-gym venv instead of the page's), with the rows its
``python -c`` line writes, and run with the ``rollgym`` console script, then ``rollgym traces
check``: rollgym starts the resource server, the simulated model plays it through the
``tool_loop`` agent (both tools, then an answer), every rollout completes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from console_script import doc_block, page_commands, require_script, run_and_check, script_env
from nemo_gym_support import PYTHON, needs_nemo_gym

pytestmark = [pytest.mark.e2e, needs_nemo_gym]

PAGE = "environments-from-elsewhere.md"
PAGE_PYTHON = "python: nemo-gym-venv/bin/python"


def test_the_pages_nemo_gym_example_runs_verbatim(tmp_path: Path) -> None:
    require_script()
    (tmp_path / "word_server.py").write_text(doc_block(PAGE, "# word_server.py"))
    config = doc_block(PAGE, "# word.yaml, beside word_server.py")
    assert PAGE_PYTHON in config
    (tmp_path / "word.yaml").write_text(config.replace(PAGE_PYTHON, f"python: {PYTHON}"))
    env = script_env()
    page_commands(
        tmp_path,
        doc_block(PAGE, "python3 -c 'import json; tools", "bash"),
        "rollgym run word.yaml",
        env,
    )
    records = run_and_check(tmp_path, "word.yaml", env)
    assert len(records) == 20
    # the simulated model answers the last tool's output (or, a wrong rollout, that it does
    # not know), never the word: every reward is the server's 0
    assert {r["reward"] for r in records} == {0.0}
    looked = [r["result"] for r in records if '"letter"' in r["result"]["answer"]]
    assert looked, records[0]
    assert all(result["details"]["tool_calls"] == 2 for result in looked)  # length, letter
    assert (tmp_path / "out" / "logs" / "word.nemo_gym.log").exists()
