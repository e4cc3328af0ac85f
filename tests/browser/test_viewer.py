"""The viewer in headless Chromium (system browser): overview, a rollout's waterfall, attributes.

Screenshots for docs/trace-store.md are written to docs/images/ only when
ROLLGYM_SCREENSHOTS=1, so CI never dirties the tree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rollgym.telemetry import names
from rollgym.tracestore.store_process import TraceStoreProcess
from synthetic_run import SyntheticRun

from .conftest import BROWSER_MARKS, doc_shot, span_details, synthetic_viewer

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def viewer(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TraceStoreProcess, SyntheticRun]]:
    run_dir = tmp_path_factory.mktemp("run")
    with synthetic_viewer(run_dir, rollouts=60) as (store, run):
        (run_dir / "summary.json").write_text(
            json.dumps(
                {
                    "run_id": run.run_id,
                    "requested": 60,
                    "completed": len(run.rollouts),
                    "failed": len(run.failures),
                }
            )
        )
        yield store, run


def test_overview_table_filter_and_paging(viewer, page) -> None:
    store, run = viewer
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")
    assert "simple_agent" in page.inner_text("body")
    assert page.locator("svg rect.hbar").count() == 20
    axes = page.locator("#overview-duration text.axis-label").all_text_contents()
    assert axes == ["dispatch duration (ms)", "dispatches"]  # the histogram's axes are named
    assert page.locator("#roots a").count() == 2  # job and startup traces
    assert page.locator("#rollout-table tr.row").count() == 25
    doc_shot(page, "viewer-overview.png")
    page.select_option("#filters select[name=outcome]", "error")
    page.click("#filters button[type=submit]")
    page.wait_for_function(
        "[...document.querySelectorAll('#rollout-table tr.row td:nth-child(4)')]"
        ".every(td => td.textContent === 'error')"
    )
    errors = page.locator("#rollout-table tr.row").count()
    assert errors == len(run.failures) + 12  # 12 retried rollouts failed their first attempt
    page.select_option("#filters select[name=outcome]", "")
    page.click("#filters button[type=submit]")
    page.wait_for_selector("text=1–25 of")
    page.click("text=next ›")
    page.wait_for_selector("text=26–50 of")
    page.click("#rollout-table th:has-text('duration')")
    page.wait_for_selector("text=duration ▲")


def test_open_rollout_see_spans_click_attributes(viewer, page) -> None:
    store, run = viewer
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")  # as a user does: search once it is drawn
    page.fill("#search", "4-0")
    page.click("#search-form button")
    # The rollout page's attempts: the overview's failed-attempts table has the class
    # "attempt" too, and counting before the search had navigated found it (1, not 2).
    page.wait_for_selector("section.attempt")
    assert page.locator("section.attempt").count() == 2  # 4-0 failed once, 4-0-a1 succeeded
    rows = page.locator(".waterfall").first.locator(".span-row")
    names_shown = rows.evaluate_all("rows => rows.map(r => r.dataset.name)")
    for expected in (
        names.SPAN_DISPATCH,
        names.SPAN_ROLLOUT,
        names.SPAN_MODEL_CHAT,
        names.SPAN_VERIFY,
    ):
        assert expected in names_shown
    details = span_details(page, names.SPAN_MODEL_CHAT)
    assert names.GEN_AI_USAGE_OUTPUT_TOKENS in details and "4-0" in details
    doc_shot(page, "viewer-rollout.png")
    page.locator(".job-link").first.click()
    page.wait_for_selector(f".span-row[data-name='{names.SPAN_JOB}']")
    assert page.locator(".span-row").count() == 3  # job + aggregate_metrics + finalize
    doc_shot(page, "viewer-job-trace.png")
