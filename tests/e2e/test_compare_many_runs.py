"""``rollgym compare`` over five real runs made with the real CLI over policy versions: what
differs in their configs, each run's figures and staleness, reward over version and step.

Every figure is checked against the runs' own files (``rollouts.jsonl``, ``summary.json``,
``config.yaml``), read here without rollgym's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import pythonpath
from versioned_runs import RUNS, STEP, accuracy, versioned_runs

pytestmark = pytest.mark.e2e


def _records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _compare(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollgym", "compare", *args],
        env={**os.environ, "PYTHONPATH": pythonpath(), "COLUMNS": "160"},
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return versioned_runs(tmp_path_factory.mktemp("five"))


def test_five_runs_name_their_config_differences_figures_and_staleness(runs: list[Path]) -> None:
    result = orjson.loads(_compare(*map(str, runs), "--json", "--resamples", "300").stdout)
    differences = {d["key"]: d["values"] for d in result["config_differences"]}
    assert differences == {
        "run.max_staleness": [None, None, None, 0, None],
        "run.step": [STEP * i for i in range(RUNS)],
        "servers.policy.accuracy": [accuracy(i) for i in range(RUNS)],
    }
    assert len(result["runs"]) == RUNS
    for run, row in zip(runs, result["runs"], strict=True):
        summary = orjson.loads((run / "summary.json").read_bytes())
        walker = summary["by_dispatch_name"]["walker"]
        assert row["run_id"] == summary["run_id"]
        assert (row["completed"], row["failed"]) == (summary["completed"], summary["failed"])
        assert row["mean_reward"] == pytest.approx(walker["mean_reward"])
        for k, value in row["pass_at_k"].items():
            assert value == pytest.approx(walker["pass_at_k"][k])
        staleness = summary["staleness"]
        assert row["staleness"]["results_by_lag"] == staleness["results_by_lag"]
        assert row["staleness"]["max_lag"] == staleness["max_lag"]
        assert row["staleness"]["stale_failures"] == staleness["stale_failures"]
    baseline = result["runs"][0]["mean_reward"]
    for row in result["runs"][1:]:
        delta = row["vs_first"]
        assert delta["reward_diff"] == pytest.approx(row["mean_reward"] - baseline)
        low, high = delta["reward_diff_ci"]
        assert low <= delta["reward_diff"] <= high
    # the run that bounds staleness refused results: stale failures, no result behind
    bounded = result["runs"][3]
    assert bounded["staleness"]["stale_failures"] == bounded["failed_by_kind"].get("stale", 0)
    assert bounded["staleness"]["behind"] == 0
    # the others ran multi-turn rollouts across version bumps: some results came back behind
    assert any(row["staleness"]["behind"] for i, row in enumerate(result["runs"]) if i != 3)


def test_reward_over_policy_version_pools_the_runs_per_first_call_version(
    runs: list[Path],
) -> None:
    result = orjson.loads(_compare(*map(str, runs), "--over", "version", "--json").stdout)
    expected: dict[int, list[float]] = defaultdict(list)
    runs_at: dict[int, set[int]] = defaultdict(set)
    for index, run in enumerate(runs):
        for record in _records(run / "rollouts.jsonl"):
            expected[record["policy_versions"][0]].append(record["reward"])
            runs_at[record["policy_versions"][0]].add(index)
    points = result["points"]
    assert [p["x"] for p in points] == sorted(expected)
    assert len(points) > RUNS  # the model moved its weights on within each run
    for point in points:
        rewards = expected[point["x"]]
        assert point["rollouts"] == len(rewards)
        assert point["mean_reward"] == pytest.approx(sum(rewards) / len(rewards))
        assert set(point["runs"]) == runs_at[point["x"]]


def test_reward_over_step_follows_run_step_whatever_the_order_given(runs: list[Path]) -> None:
    shuffled = [runs[i] for i in (3, 0, 4, 1, 2)]
    result = orjson.loads(_compare(*map(str, shuffled), "--over", "step", "--json").stdout)
    points = result["points"]
    assert [p["x"] for p in points] == [STEP * i for i in range(RUNS)]
    for point in points:
        run = shuffled[point["runs"][0]]
        summary = orjson.loads((run / "summary.json").read_bytes())
        assert point["step_from"] == "run.step"
        assert point["mean_reward"] == pytest.approx(
            summary["by_dispatch_name"]["walker"]["mean_reward"]
        )
        assert point["failed"] == summary["failed"]
    text = _compare(*map(str, shuffled), "--over", "step").stdout
    assert "by run step" in text and "servers.policy.accuracy" in text


def test_the_tables_name_the_differences_and_two_runs_keep_their_table(runs: list[Path]) -> None:
    text = _compare(*map(str, runs), "--resamples", "200").stdout
    assert "config differences" in text
    for key in ("run.max_staleness", "run.step", "servers.policy.accuracy"):
        assert key in text
    assert "#4 step 400" in text and "vs #0" in text
    two = _compare(str(runs[0]), str(runs[1]), "--resamples", "200").stdout
    assert "servers.policy.accuracy" in two
    assert "A = " in two and "B - A" in two and "tasks that moved most" in two


def test_a_missing_run_is_one_line(runs: list[Path], tmp_path: Path) -> None:
    done = _compare(str(runs[0]), str(runs[1]), str(tmp_path / "nope"), check=False)
    assert done.returncode == 2
    assert done.stderr == f"rollgym compare: {tmp_path / 'nope'}: no such run directory\n"
