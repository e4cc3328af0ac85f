"""The group view and the verifier's details in headless Chromium, over a real GRPO-style run.

The run (``tests/e2e/grpo_run.py``) has four repeats a task and some all-equal groups; what
the page shows is checked against ``rollouts.jsonl`` and ``trajectories.jsonl`` read here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rollgym.tracestore.store_process import TraceStoreProcess

from .conftest import BROWSER_MARKS, doc_shot, e2e_run_builder, open_view

pytestmark = [*BROWSER_MARKS, pytest.mark.e2e]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return e2e_run_builder("grpo_run", "grpo_run")(tmp_path_factory.mktemp("grpo"))


def _rewards(run: Path) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for line in (run / "rollouts.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        groups.setdefault(record["task_index"], []).append(record["reward"])
    return groups


def test_group_view_marks_the_zero_variance_groups(
    run: Path, store: TraceStoreProcess, page: Any
) -> None:
    rewards = _rewards(run)
    zero = {task for task, values in rewards.items() if len(set(values)) == 1}
    assert zero and len(zero) < len(rewards)  # the run has both kinds
    page.goto(store.endpoint + "/")
    page.wait_for_selector("#rollout-table tr.row")
    assert page.inner_text("#groups-card").startswith(f"{len(zero)} / {len(rewards)}")
    page.click("#groups-card")
    page.wait_for_selector("#group-table tr.group")
    summary = page.inner_text("#groups-summary")
    assert f"{len(zero)}\nzero-variance groups" in summary
    assert f"{100 * len(zero) / len(rewards):.1f}%" in summary
    rows = page.locator("#group-table tr.group")
    assert rows.count() == len(rewards)
    marked = page.locator("#group-table tr.group.zero-variance")
    marked_tasks = {int(t) for t in marked.evaluate_all("rs => rs.map(r => r.dataset.task)")}
    assert marked_tasks == zero
    for task, values in rewards.items():  # the repeats side by side, each with its reward
        row = page.locator(f"#group-table tr.group[data-task='{task}']")
        members = row.locator("a.member")
        assert members.count() == len(values)
        shown = sorted(float(t.split()[-1]) for t in members.all_inner_texts())
        assert shown == sorted(values)
    doc_shot(page, "viewer-groups.png")
    page.click("#zero-toggle")
    page.wait_for_function(
        f"document.querySelectorAll('#group-table tr.group').length === {len(zero)}"
    )
    assert page.locator("#group-table tr.group.zero-variance").count() == len(zero)
    # a member opens its rollout
    first = min(zero)
    page.click(f"#group-table tr.group[data-task='{first}'] a.member[data-rollout='{first}-0']")
    page.wait_for_selector("#conversation")
    assert f"Conversation of {first}-0" in page.inner_text("#conversation h2")


def test_rollout_page_shows_why_the_reward(run: Path, store: TraceStoreProcess, page: Any) -> None:
    records = [
        orjson.loads(line) for line in (run / "trajectories.jsonl").read_bytes().splitlines()
    ]
    record = next(r for r in records if r["reward"] == 0)  # a wrong answer: why is it wrong?
    verify = next(t for t in record["trajectory"]["turns"] if t["type"] == "verify")
    rollout_id = record["rollout_id"]
    open_view(page, f"{store.endpoint}/#/rollout/{rollout_id}")
    page.wait_for_selector(".entry.verify .verdict-details")
    shown = page.inner_text(".entry.verify .verdict-details")
    assert "why this reward" in shown
    for key, value in verify["details"].items():
        assert key in shown and str(value).lower() in shown.lower()
    doc_shot(page, "viewer-reward-details.png", "#conversation")
