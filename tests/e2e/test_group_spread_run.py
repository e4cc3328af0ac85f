"""A GRPO-style run's groups in the terminal: summary.json's ``groups`` and ``traces profile``.

Each number is checked against the rewards read straight from ``rollouts.jsonl``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from e2e_support import pythonpath
from grpo_run import (
    EASY_TASKS,
    REPEATS,
    SOLVER_TASKS,
    grpo_run,
    rewards_by_task,
    zero_variance_tasks,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grpo_run(tmp_path_factory.mktemp("grpo"))


def _rollgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollgym", *args],
        env={"PYTHONPATH": pythonpath(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_summary_counts_the_zero_variance_groups(run: Path) -> None:
    groups = orjson.loads((run / "summary.json").read_bytes())["groups"]
    zero = zero_variance_tasks(run)
    by_task = rewards_by_task(run)
    assert set(range(SOLVER_TASKS, SOLVER_TASKS + EASY_TASKS)) <= zero  # every easy group
    assert len(zero) < len(by_task)  # and some groups have spread
    assert groups["size"] == REPEATS
    assert groups["groups"] == len(by_task) == SOLVER_TASKS + EASY_TASKS
    assert groups["zero_variance"] == len(zero)
    assert groups["zero_variance_share"] == pytest.approx(len(zero) / len(by_task), abs=1e-6)
    mean_std = statistics.fmean(statistics.pstdev(r) for r in by_task.values())
    assert groups["mean_std"] == pytest.approx(mean_std, abs=1e-6)
    assert groups["short_groups"] == 0


def test_traces_profile_shows_each_group_spread(run: Path) -> None:
    shown = _rollgym("traces", "profile", str(run), "--json", "-n", "50")
    assert shown.returncode == 0, shown.stderr
    report = orjson.loads(shown.stdout)["groups"]
    by_task = rewards_by_task(run)
    assert report["zero_variance"] == len(zero_variance_tasks(run))
    rows = {row["task_index"]: row for row in report["rows"]}
    assert set(rows) == set(by_task)
    for task, rewards in by_task.items():
        row = rows[task]
        assert (row["n"], row["min"], row["max"]) == (len(rewards), min(rewards), max(rewards))
        assert row["std"] == pytest.approx(statistics.pstdev(rewards), abs=1e-9)
        assert row["zero_variance"] == (len(set(rewards)) == 1)
        assert sorted(m["rollout_id"] for m in row["members"]) == [
            f"{task}-{i}" for i in range(REPEATS)
        ]
    text = _rollgym("traces", "profile", str(run), "-n", "3")
    assert text.returncode == 0, text.stderr
    zero = len(zero_variance_tasks(run))
    assert f"{zero} zero-variance" in text.stdout
    assert "groups (3 of 12)" in text.stdout


def test_conversation_shows_the_verifier_details(run: Path) -> None:
    record = orjson.loads((run / "trajectories.jsonl").read_bytes().splitlines()[0])
    verify = next(t for t in record["trajectory"]["turns"] if t["type"] == "verify")
    expected = verify["details"]["expected"]
    shown = _rollgym("traces", "show", str(run), record["rollout_id"], "--conversation")
    assert shown.returncode == 0, shown.stderr
    assert "details (the verifier's reasons)" in shown.stdout
    assert f'"expected":"{expected}"' in shown.stdout
    as_json = _rollgym("traces", "show", str(run), record["rollout_id"], "--conversation", "--json")
    entries = orjson.loads(as_json.stdout)["conversation"]
    assert [e["details"] for e in entries if e["kind"] == "verify"] == [verify["details"]]
