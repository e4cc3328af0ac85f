"""The viewer's profile page in headless Chromium: phase shares, plots with labelled axes,
stragglers linked to their waterfalls, and a live run's progress that refreshes by itself.

Screenshots go to docs/images/ when ROLLGYM_SCREENSHOTS=1 (as for the other viewer tests).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.reading.profile_phases import PHASES
from rollgym.tracestore.store_process import TraceStoreProcess

from .conftest import BROWSER_MARKS, doc_shot, open_view, synthetic_viewer

pytestmark = BROWSER_MARKS
#: The stall limit the page is opened with (seconds without a finished span).
STALL_S = 5.0


def _progress(
    run_dir: Path, done: int, total: int, oldest: list[dict], windows: dict | None = None
) -> None:
    (run_dir / "progress.json").write_text(
        json.dumps(
            {
                "requested_so_far": total,
                "total": total,
                "completed": done,
                "failed": 0,
                "in_flight": len(oldest),
                "rate": 12.5,
                "eta_s": 8.0 if done < total else 0.0,
                "elapsed_s": 30.0,
                "oldest_in_flight": oldest,
                "dispatch_windows": windows or {},
            }
        )
    )


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TraceStoreProcess, Path]]:
    run_dir = tmp_path_factory.mktemp("run")
    with synthetic_viewer(run_dir, rollouts=40) as (store, _run):
        # "3-0" must look stalled (no span finished for STALL_S): its spans end as they are
        # emitted, so let that much time pass, whatever ran before this test
        time.sleep(STALL_S + 1.0)
        yield store, run_dir


def test_profile_page_live_then_finished(live_run, page) -> None:
    store, run_dir = live_run
    # A run still going: "3-0" has spans (finished long ago: stalled, with a stage);
    # "99-0" has none yet but has only been in flight 2 s (not stalled).
    oldest = [
        {"rollout_id": "3-0", "dispatch_name": "simple_agent", "attempt": 0, "elapsed_s": 120.0},
        {"rollout_id": "99-0", "dispatch_name": "simple_agent", "attempt": 0, "elapsed_s": 2.0},
    ]
    windows = {"simple_agent": {"window": 16, "sent": 2, "waiting": 0}}
    _progress(run_dir, 30, 40, oldest, windows)
    open_view(page, store.endpoint + f"/#/profile?stall_s={STALL_S:g}")
    page.wait_for_selector("#phase-table tr.phase")
    assert page.locator("#phase-table tr.phase").count() == len(PHASES)
    body = page.inner_text("body")
    assert "30 / 40" in body and "refreshing every 2 s" in body
    stalled = page.inner_text("#live")
    assert "Stalled" in stalled and "3-0" in stalled and "gym.rollout.dispatch" in stalled
    cells = page.locator("#dispatch-windows tr").nth(1).locator("td").all_text_contents()
    assert cells == ["simple_agent", "16", "2", "0"]
    for chart in ("#timeline", "#reward-histogram", "#duration-histogram"):
        labels = page.locator(f"{chart} text.axis-label").all_text_contents()
        assert len(labels) == 2 and all(labels), chart
    assert "reward" in page.locator("#reward-histogram text.axis-label").all_text_contents()
    assert page.locator("#reward-histogram rect.hbar").count() == 10
    assert page.locator("#timeline path.line-flight").count() == 1
    doc_shot(page, "viewer-profile-live.png")
    # The run finishes: the page notices by itself (no reload), then stops refreshing.
    _progress(run_dir, 40, 40, [])
    page.wait_for_function(
        "document.getElementById('refresh')?.textContent.includes('run finished')", timeout=15000
    )
    assert "none in flight" in page.inner_text("#live")
    doc_shot(page, "viewer-profile.png")
    # A straggler opens its waterfall.
    first = page.locator("#stragglers a").first
    rollout_id = first.inner_text()
    first.click()
    page.wait_for_function(f"location.hash === '#/rollout/{rollout_id}'")
    page.wait_for_selector("text=gym.rollout.dispatch")
