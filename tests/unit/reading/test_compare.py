"""``rollgym compare``: known answers on hand-written run directories, and the command's words."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from rollgym.cli.main import main
from rollgym.driver.summary import pass_at_k, reported_ks
from rollgym.reading.compare import BootstrapSettings, CompareError, compare_runs

FAST = BootstrapSettings(resamples=400, confidence=0.95, seed=7)


def write_run(
    root: Path,
    rewards: dict[int, list[float]],
    *,
    name: str = "solver",
    failures: dict[int, int] | None = None,
    pass_threshold: float | None = None,
    run_id: str | None = None,
) -> Path:
    """A run directory as the driver writes it: one rollout line per reward."""
    root.mkdir(parents=True)
    lines = [
        orjson.dumps(
            {
                "rollout_id": f"{task}-{index}",
                "task_index": task,
                "rollout_index": index,
                "attempt": 0,
                "dispatch_name": name,
                "reward": reward,
            }
        )
        for task, values in rewards.items()
        for index, reward in enumerate(values)
    ]
    (root / "rollouts.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    failed = [
        orjson.dumps({"task_index": task, "dispatch_name": name, "error_kind": "timeout"})
        for task, count in (failures or {}).items()
        for _ in range(count)
    ]
    (root / "failures.jsonl").write_bytes(b"".join(line + b"\n" for line in failed))
    if pass_threshold is not None:
        (root / "config.yaml").write_text(f"run:\n  pass_threshold: {pass_threshold}\n")
    if run_id is not None:
        (root / "summary.json").write_bytes(orjson.dumps({"run_id": run_id}))
    return root


def only_row(result: dict) -> dict:
    (row,) = result["by_dispatch"]
    return row


def test_identical_runs_differ_by_nothing(tmp_path: Path) -> None:
    rewards = {0: [1.0, 0.0, 1.0], 1: [0.0, 0.0, 1.0], 2: [1.0, 1.0, 1.0]}
    a, b = write_run(tmp_path / "a", rewards), write_run(tmp_path / "b", rewards)
    row = only_row(compare_runs(a, b, FAST))
    assert row["reward_a"] == row["reward_b"] == pytest.approx(6 / 9)
    assert row["reward_diff"] == 0.0
    # paired over the same tasks with the same samples: every resample differs by exactly 0
    assert row["reward_diff_ci"] == [0.0, 0.0]
    assert row["significant"] is False
    assert row["paired_tasks"] == 3


def test_a_clear_improvement_is_flagged(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {task: [0.0, 0.0] for task in range(20)})
    b = write_run(tmp_path / "b", {task: [1.0, 1.0] for task in range(20)})
    row = only_row(compare_runs(a, b, FAST))
    assert row["reward_diff"] == 1.0
    assert row["reward_diff_ci"] == [1.0, 1.0]
    assert row["significant"] is True
    assert row["pass_at_k"]["1"] == {
        "a": 0.0,
        "b": 1.0,
        "diff": 1.0,
        "diff_ci": [1.0, 1.0],
        "significant": True,
    }


def test_pairing_by_task_sees_a_small_consistent_gain(tmp_path: Path) -> None:
    """Tasks of very different difficulty, B a little better on each: only pairing sees it.

    Resampling tasks of the two runs independently would carry the spread between tasks into
    the interval; resampling them as pairs cancels it, so the interval excludes 0.
    """
    easy_to_hard = {task: [task / 20] * 4 for task in range(20)}
    better = {task: [min(1.0, task / 20 + 0.05)] * 4 for task in range(20)}
    a, b = write_run(tmp_path / "a", easy_to_hard), write_run(tmp_path / "b", better)
    row = only_row(compare_runs(a, b, FAST))
    low, high = row["reward_diff_ci"]
    assert 0.0 < low <= row["reward_diff"] <= high < 0.06
    assert row["significant"] is True
    # the same rewards under other task indexes are unpaired: the interval spans 0
    shifted = write_run(tmp_path / "c", {task + 100: r for task, r in better.items()})
    unpaired = only_row(compare_runs(a, shifted, FAST))
    assert unpaired["paired_tasks"] == 0
    assert unpaired["reward_diff_ci"][0] < 0.0 < unpaired["reward_diff_ci"][1]
    assert unpaired["significant"] is False


def test_each_run_counts_passes_at_its_own_threshold(tmp_path: Path) -> None:
    rewards = {0: [0.6, 0.6], 1: [0.4, 0.4]}
    a = write_run(tmp_path / "a", rewards, pass_threshold=1.0)
    b = write_run(tmp_path / "b", rewards, pass_threshold=0.5)
    row = only_row(compare_runs(a, b, FAST))
    assert row["pass_at_k"]["1"]["a"] == 0.0
    assert row["pass_at_k"]["1"]["b"] == 0.5
    assert row["reward_diff"] == 0.0


def test_a_config_yaml_that_is_not_text_leaves_the_default_threshold(tmp_path: Path) -> None:
    rewards = {0: [1.0, 1.0], 1: [0.5, 0.5]}
    a = write_run(tmp_path / "a", rewards, pass_threshold=0.5)
    b = write_run(tmp_path / "b", rewards)
    (b / "config.yaml").write_bytes(b"run:\n  pass_threshold: 0.5 \xff\xfe\n")
    row = only_row(compare_runs(a, b, FAST))
    passes = row["pass_at_k"]["1"]
    assert (passes["a"], passes["b"]) == (1.0, 0.5)  # b's passes at the default of 1.0


def test_tasks_failures_and_run_ids_are_reported(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {0: [1.0, 1.0], 1: [0.0]}, failures={1: 1}, run_id="run-a")
    b = write_run(tmp_path / "b", {0: [0.0, 0.0], 1: [1.0, 1.0]}, run_id="run-b")
    result = compare_runs(a, b, FAST)
    assert result["run_a"]["run_id"] == "run-a" and result["run_b"]["run_id"] == "run-b"
    assert (result["run_a"]["completed"], result["run_a"]["failed"]) == (3, 1)
    row = only_row(result)
    assert (row["completed_a"], row["failed_a"], row["completed_b"], row["failed_b"]) == (
        3,
        1,
        4,
        0,
    )
    tasks = {task["task_index"]: task for task in result["by_task"]}
    assert tasks[0]["reward_diff"] == -1.0 and tasks[0]["reward_diff_ci"] == [-1.0, -1.0]
    assert tasks[0]["significant"] is True
    assert (tasks[1]["n_a"], tasks[1]["failed_a"], tasks[1]["reward_diff"]) == (1, 1, 1.0)


def test_the_same_seed_gives_the_same_intervals(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {t: [float(t % 2), 1.0, 0.0] for t in range(15)})
    b = write_run(tmp_path / "b", {t: [float(t % 3 == 0), 1.0, 1.0] for t in range(15)})
    first, again = compare_runs(a, b, FAST), compare_runs(a, b, FAST)
    assert first == again
    other = compare_runs(a, b, BootstrapSettings(resamples=400, seed=8))
    assert other["by_dispatch"][0]["reward_diff_ci"] != first["by_dispatch"][0]["reward_diff_ci"]


def test_a_torn_last_line_is_skipped_and_left_in_place(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {0: [1.0]})
    b = write_run(tmp_path / "b", {0: [0.0]})
    with open(b / "rollouts.jsonl", "ab") as handle:
        handle.write(b'{"task_index": 0, "dispatch_name": "solver", "rew')
    before = (b / "rollouts.jsonl").read_bytes()
    row = only_row(compare_runs(a, b, FAST))
    assert row["completed_b"] == 1
    assert (b / "rollouts.jsonl").read_bytes() == before, "compare must never repair a run"


def test_a_dispatch_name_only_one_run_has(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {0: [1.0]}, name="old")
    b = write_run(tmp_path / "b", {0: [1.0]}, name="new")
    rows = {row["dispatch_name"]: row for row in compare_runs(a, b, FAST)["by_dispatch"]}
    assert rows["old"]["reward_b"] is None and rows["old"]["reward_diff"] is None
    assert rows["old"]["reward_diff_ci"] is None and rows["old"]["significant"] is False
    assert rows["new"]["completed_a"] == 0 and rows["new"]["completed_b"] == 1


def test_not_a_run_directory(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {0: [1.0]})
    with pytest.raises(CompareError, match="no such run directory"):
        compare_runs(a, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match="holds no rollouts.jsonl"):
        compare_runs(tmp_path / "empty", a)


def test_the_command_prints_a_table_json_and_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", {t: [0.0, 0.0] for t in range(10)}, run_id="base")
    b = write_run(tmp_path / "b", {t: [1.0, 1.0] for t in range(10)}, run_id="tuned")
    assert main(["compare", str(a), str(b), "--resamples", "200"]) == 0
    table = capsys.readouterr().out
    assert "A = base, B = tuned" in table
    assert "+1.000 [+1.000, +1.000] *" in table
    assert "mean reward differs beyond the interval for: solver" in table
    assert main(["compare", str(a), str(b), "--json", "--resamples", "50"]) == 0
    result = orjson.loads(capsys.readouterr().out)
    assert result["resamples"] == 50
    row = result["by_dispatch"][0]
    assert {"dispatch_name", "reward_a", "reward_b", "reward_diff_ci"} <= row.keys()
    assert len(result["by_task"]) == 10
    assert main(["compare", str(a), str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"rollgym compare: {tmp_path / 'nope'}: no such run directory"
    assert main(["compare", str(a), str(b), "--resamples", "0"]) == 2
    assert "--resamples must be at least 1" in capsys.readouterr().err


def test_pass_at_k_of_many_repeats_is_each_tasks_own_averaged(tmp_path: Path) -> None:
    """Each task's pass@k is worked out once and reused by every resample: the figures are
    those of the definition, at the reported k, and each interval holds its figure."""
    rng = random.Random(3)
    rewards = {task: [float(rng.random() < task / 40) for _ in range(48)] for task in range(40)}
    a = write_run(tmp_path / "a", rewards)
    b = write_run(tmp_path / "b", {t: [1.0 - r for r in values] for t, values in rewards.items()})
    row = only_row(compare_runs(a, b, FAST))
    assert list(row["pass_at_k"]) == [str(k) for k in reported_ks(48)]
    for k in reported_ks(48):
        expected = sum(pass_at_k(48, int(sum(v)), k) for v in rewards.values()) / 40
        entry = row["pass_at_k"][str(k)]
        assert entry["a"] == pytest.approx(expected)
        low, high = entry["diff_ci"]
        assert low <= entry["diff"] <= high
