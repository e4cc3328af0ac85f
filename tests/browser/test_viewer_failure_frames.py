"""A failure raised in an agent author's own code, on the rollout page in headless Chromium:
the author's file:line, the log with the whole traceback, and the turns recorded before it
failed. Over a real run (``tests/e2e/insight_run.py``), checked against failures.jsonl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollgym.tracestore.store_process import TraceStoreProcess

from .conftest import BROWSER_MARKS, E2E, doc_shot, e2e_run_builder, open_view

pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return e2e_run_builder("insight_run", "failure_run")(tmp_path_factory.mktemp("failures"))


def _parse_line() -> int:
    source = (E2E / "failing_user_agent.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if "# PARSE LINE" in line)


def test_failed_rollout_page_shows_the_authors_frames_log_and_partial_turns(
    run: Path, store: TraceStoreProcess, page: Any
) -> None:
    open_view(page, store.endpoint + "/#/rollout/0-0")
    page.wait_for_selector("#rollout-error #own-frames")
    frames = page.locator("#own-frames .frame").all_inner_texts()
    assert frames[-1].endswith(f"failing_user_agent.py:{_parse_line()} in parse_answer")
    assert "logs/parser.log" in page.inner_text("#failure-log")
    assert "Partial trajectory" in page.inner_text("#partial-note")
    entries = page.locator("#conversation .entry")
    assert "2 + 2" in entries.nth(0).inner_text()
    assert page.locator("#conversation .entry.answer").count() == 1
    assert page.locator("#conversation-hint").count() == 0
    doc_shot(page, "viewer-failure-frames.png", "#conversation")
