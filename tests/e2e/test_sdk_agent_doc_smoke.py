"""The SDK agent of docs/writing-an-agent.md, smoke-tested exactly as the page says.

The page's ``sdk_agents.py`` and ``smoke.yaml`` are taken from it verbatim, written to a
temporary working directory with the rows its ``printf`` line makes, and run with the
``rollgym`` console script (``rollgym run smoke.yaml``, then ``rollgym traces check out``),
as a new user would: the official OpenAI SDK against the simulated model, every reward 1.0,
the trace contract holding.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from console_script import DOCS, doc_block, require_script, run_and_check

pytestmark = pytest.mark.e2e

PAGE = "writing-an-agent.md"
DOC = DOCS / PAGE


def test_the_pages_sdk_agent_smoke_test_runs_verbatim(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    require_script()
    (tmp_path / "sdk_agents.py").write_text(doc_block(PAGE, "# sdk_agents.py"))
    (tmp_path / "smoke.yaml").write_text(doc_block(PAGE, "# smoke.yaml, beside sdk_agents.py"))
    printf = re.search(r"^\$ printf '(.*)' > rows\.jsonl$", DOC.read_text(), re.M)
    assert printf is not None, f"{DOC.name}: no printf line writing rows.jsonl"
    (tmp_path / "rows.jsonl").write_text(printf.group(1).replace("\\n", "\n"))
    records = run_and_check(tmp_path, "smoke.yaml")
    assert len(records) == 2
    assert all(r["reward"] == 1.0 and r["usage"]["model_calls"] == 1 for r in records), records
