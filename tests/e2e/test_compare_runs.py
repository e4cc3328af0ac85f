"""``rollgym compare`` on two real quickstart runs: its figures are the driver's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from e2e_support import REPO, pythonpath

pytestmark = pytest.mark.e2e


def _run(out: Path, *overrides: str) -> tuple[dict, str]:
    """One quickstart run into ``out``: its summary.json, and what it printed (piped)."""
    command = [sys.executable, "-m", "rollgym", "run", str(REPO / "examples" / "quickstart.yaml")]
    env_overrides = [f"run.output_dir={out}", "telemetry.preset=off", *overrides]
    done = subprocess.run(
        [*command, *env_overrides],
        check=True,
        env={**os.environ, "PYTHONPATH": pythonpath(), "OTEL_SDK_DISABLED": "true"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    return orjson.loads((out / "summary.json").read_bytes()), done.stdout


def _compare(tmp_path: Path, *options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rollgym", "compare", str(tmp_path / "a"), str(tmp_path / "b")]
        + ["--resamples", "300", *options],
        env={**os.environ, "PYTHONPATH": pythonpath()},
        capture_output=True,
        check=True,
        text=True,
        timeout=120,
    )
    return done.stdout


def test_compare_two_quickstart_runs(tmp_path: Path) -> None:
    summary_a, printed = _run(tmp_path / "a")
    summary_b, _ = _run(tmp_path / "b", "run.repeats=4")
    # piped, as into a job's log: the accounting line whole, not broken at 80 columns
    rate = f"{summary_a['rollouts_per_s']:.1f} rollouts/s"
    accounting = "requested 330 = completed 330 + failed 0 (failures by kind: none); " + rate
    assert accounting in printed.splitlines()
    result = orjson.loads(_compare(tmp_path, "--json"))
    # the one override between them is the one difference named (run id and folder aside)
    assert result["config_differences"] == [{"key": "run.repeats", "values": [3, 4]}]
    assert result["run_a"]["run_id"] == summary_a["run_id"]
    assert result["run_b"]["run_id"] == summary_b["run_id"]
    rows = {row["dispatch_name"]: row for row in result["by_dispatch"]}
    assert (
        rows.keys() == summary_a["by_dispatch_name"].keys() == summary_b["by_dispatch_name"].keys()
    )
    for name, row in rows.items():
        stats_a, stats_b = summary_a["by_dispatch_name"][name], summary_b["by_dispatch_name"][name]
        assert row["completed_a"] == stats_a["completed"]
        assert row["completed_b"] == stats_b["completed"]
        assert row["reward_a"] == pytest.approx(stats_a["mean_reward"])
        assert row["reward_b"] == pytest.approx(stats_b["mean_reward"])
        low, high = row["reward_diff_ci"]
        assert low <= row["reward_diff"] <= high
        for k, entry in row["pass_at_k"].items():
            assert entry["a"] == pytest.approx(stats_a["pass_at_k"][k])
        assert row["paired_tasks"] == row["tasks_a"] == row["tasks_b"]
    tasks = {(row["dispatch_name"], row["task_index"]) for row in result["by_task"]}
    assert len(tasks) == 110  # the quickstart's 110 task rows, each under its dispatch name
    # the table, piped: every dispatch name and both mean rewards in full on its row
    printed = _compare(tmp_path)
    table = printed[: printed.index("tasks that moved most")].splitlines()
    for name, row in rows.items():
        (line,) = [line for line in table if line.startswith(f"│ {name} ")]
        assert f"{row['reward_a']:.3f}" in line and f"{row['reward_b']:.3f}" in line
