"""A finished run whose input had one malformed line, in headless Chromium: the profile page
says the run finished (it does not refresh forever) and the failures panel names the bad line
by its input line, not "None"."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

from .conftest import BROWSER_MARKS, doc_shot, open_view

E2E = Path(__file__).resolve().parents[1] / "e2e"
pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceStoreProcess]:
    sys.path.insert(0, str(E2E))
    try:
        from grpo_run import bad_line_run
    finally:
        sys.path.remove(str(E2E))
    run, _ = bad_line_run(tmp_path_factory.mktemp("bad-line"))
    process = start_trace_store(run / "traces.db", run / "logs" / "viewer.log", run_dir=run)
    try:
        yield process
    finally:
        process.stop()


def test_the_finished_run_is_not_refreshed_and_its_bad_line_is_named(
    store: TraceStoreProcess, page: Any
) -> None:
    sys.path.insert(0, str(E2E))
    try:
        from grpo_run import BAD_LINE, GOOD_LINES, REPEATS
    finally:
        sys.path.remove(str(E2E))
    total = GOOD_LINES * REPEATS + 1
    open_view(page, store.endpoint + "/#/profile")
    page.wait_for_selector("#refresh")
    assert page.inner_text("#refresh") == "run finished: not refreshing"
    assert f"{total} / {total}" in page.inner_text("#live")
    open_view(page, store.endpoint + "/#/")
    page.wait_for_selector(".failure-groups.final tr.failure-group")
    final = page.inner_text(".failure-groups.final")
    assert f"input line {BAD_LINE}" in final and "None" not in final
    assert page.locator(".failure-groups.final a.rollout-link").count() == 0  # nothing to open
    doc_shot(page, "viewer-failures-bad-line.png", "#failures")
