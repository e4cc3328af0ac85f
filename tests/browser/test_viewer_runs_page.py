"""The viewer's Runs page in headless Chromium, over five real runs over policy versions.

The five runs (``tests/e2e/versioned_runs.py``: a training loop's evaluations at steps 0 to 400)
are served by the real command, ``rollgym traces serve --run-dir FIRST --runs FOLDER``; what the
page shows (the runs offered, the config keys that differ, the chart's points, each run's
figures and staleness) is checked against the runs' own files, read here without rollgym's code.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from waits import wait_for

from .conftest import BROWSER_MARKS, doc_shot, e2e_run_builder, open_view

pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


def _summary(run: Path) -> dict[str, Any]:
    summary: dict[str, Any] = orjson.loads((run / "summary.json").read_bytes())
    return summary


def _first_versions(run: Path) -> set[int]:
    lines = (run / "rollouts.jsonl").read_bytes().splitlines()
    return {orjson.loads(line)["policy_versions"][0] for line in lines if line.strip()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    made: list[Path] = e2e_run_builder("versioned_runs", "versioned_runs")(
        tmp_path_factory.mktemp("evaluations")
    )
    return made


@pytest.fixture(scope="module")
def viewer(runs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rollgym traces serve`` over the first run, offering every run under their folder."""
    ready = tmp_path_factory.mktemp("viewer") / "ready.json"
    folder = runs[0].parent.parent
    command = [sys.executable, "-m", "rollgym", "traces", "serve", "--run-dir", str(runs[0])]
    command += ["--runs", str(folder), "--port", "0", "--ready-file", str(ready)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready.exists() or process.poll() is not None, timeout=60, interval=0.1)
        assert ready.exists(), process.stdout.read().decode() if process.stdout else ""
        yield orjson.loads(ready.read_bytes())["endpoint"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_runs_page_shows_differences_reward_over_version_and_staleness(
    page: Any, viewer: str, runs: list[Path]
) -> None:
    open_view(page, f"{viewer}/#/runs")
    page.wait_for_selector("#runs-table")
    offered = page.locator("tr.offered-run")
    assert offered.count() == len(runs)
    assert offered.nth(4).inner_text().split("\t")[1] == "#4 step 400"
    keys = page.locator("#config-diff tr.config-key").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert keys == ["run.max_staleness", "run.step", "servers.policy.accuracy"]
    accuracy = page.locator('#config-diff tr[data-key="servers.policy.accuracy"] td')
    assert accuracy.all_inner_texts()[1:] == ["0.3", "0.45", "0.6", "0.75", "0.9"]
    # over policy version: one point per first-call version of the five runs together
    versions = set().union(*(_first_versions(run) for run in runs))
    points = page.locator("#runs-series-table tr.series-point").evaluate_all(
        "rows => rows.map(r => r.dataset.x)"
    )
    assert points == [str(v) for v in sorted(versions)]
    assert page.locator("#runs-chart circle.dot-reward").count() == len(versions)
    assert page.locator("#over-version").get_attribute("class") == "over active"
    # each run's figures and its staleness bar, from its summary.json
    rows = page.locator("#runs-table tr.run-row")
    assert rows.count() == len(runs)
    for index, run in enumerate(runs):
        summary = _summary(run)
        cells = rows.nth(index).locator("td").all_inner_texts()
        assert cells[1] == summary["run_id"]
        assert cells[2:4] == [str(summary["completed"]), str(summary["failed"])]
        assert cells[4] == f"{summary['by_dispatch_name']['walker']['mean_reward']:.3f}"
        parts = (
            rows.nth(index)
            .locator(".lag-part")
            .evaluate_all("parts => parts.map(p => p.dataset.lag)")
        )
        assert parts == list(summary["staleness"]["results_by_lag"])
        assert cells[-2] == str(summary["staleness"]["stale_failures"])
    assert rows.nth(0).locator("td").nth(5).inner_text() == "baseline"
    doc_shot(page, "viewer-runs.png")


def test_runs_page_over_step_and_a_smaller_pick(page: Any, viewer: str, runs: list[Path]) -> None:
    open_view(page, f"{viewer}/#/runs")
    page.wait_for_selector("#runs-table")
    page.locator('tr.offered-run[data-run="3"] input').uncheck()
    page.click("#runs-show")
    page.wait_for_function("location.hash.includes('runs=0%2C1%2C2%2C4')")
    page.wait_for_function("document.querySelectorAll('#runs-table tr.run-row').length === 4")
    assert page.locator("#runs-table tr.run-row").count() == 4
    # without the run that bounded staleness, its key no longer differs
    keys = page.locator("#config-diff tr.config-key").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert keys == ["run.step", "servers.policy.accuracy"]
    page.click("#over-step")
    page.wait_for_selector("#over-step.active")
    points = page.locator("#runs-series-table tr.series-point").evaluate_all(
        "rows => rows.map(r => r.dataset.x)"
    )
    assert points == ["0", "100", "200", "400"]
    page.click("#runs-series-details summary")  # the numbers behind the chart
    rewards = page.locator("#runs-series-table tr.series-point td:nth-child(5)").all_inner_texts()
    picked = [runs[i] for i in (0, 1, 2, 4)]
    assert rewards == [
        f"{_summary(run)['by_dispatch_name']['walker']['mean_reward']:.3f}" for run in picked
    ]
    doc_shot(page, "viewer-runs-step.png", "#runs-series")
