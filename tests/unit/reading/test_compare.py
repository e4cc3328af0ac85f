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
    with pytest.raises(SystemExit) as refused:  # argparse's own one line
        main(["compare", str(a), str(b), "--resamples", "0"])
    assert refused.value.code == 2
    assert "argument --resamples: must be at least 1, got 0" in capsys.readouterr().err


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


def _reference_intervals(
    a: dict[int, list[float]], b: dict[int, list[float]], k: int, settings: BootstrapSettings
) -> tuple[list[float] | None, list[float] | None, dict[int, list[float] | None]]:
    """The bootstrap by its definition, slow and plain: draw the tasks themselves (paired where
    both runs have them, then each run's own) and each task's rewards with ``rng.choices``,
    and work every statistic out again for every draw."""

    def mean_reward(tasks: list[list[float]]) -> float | None:
        count = sum(len(t) for t in tasks)
        return sum(sum(t) for t in tasks) / count if count else None

    def pass_k(tasks: list[list[float]]) -> float | None:
        scores = [pass_at_k(len(t), int(sum(r >= 1.0 for r in t)), k) for t in tasks if len(t) >= k]
        return sum(scores) / len(scores) if scores else None

    def interval(draws: list[float]) -> list[float] | None:
        from rollgym.reading.compare import percentile_interval

        return percentile_interval(draws, settings.confidence)

    def cluster(statistic) -> list[float] | None:  # type: ignore[no-untyped-def]
        rng = random.Random(settings.seed)
        shared = sorted(a.keys() & b.keys())
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        draws = []
        for _ in range(settings.resamples):
            picked = rng.choices(shared, k=len(shared)) if shared else []
            side_a, side_b = [a[i] for i in picked], [b[i] for i in picked]
            if only_a:
                side_a += [a[i] for i in rng.choices(only_a, k=len(only_a))]
            if only_b:
                side_b += [b[i] for i in rng.choices(only_b, k=len(only_b))]
            value_a, value_b = statistic(side_a), statistic(side_b)
            if value_a is not None and value_b is not None:
                draws.append(value_b - value_a)
        return interval(draws)

    per_task = {}
    for task in sorted(a.keys() & b.keys()):
        rng = random.Random(settings.seed)
        ra, rb = a[task], b[task]
        if not ra or not rb:
            per_task[task] = None
            continue
        per_task[task] = interval(
            [
                sum(rng.choices(rb, k=len(rb))) / len(rb)
                - sum(rng.choices(ra, k=len(ra))) / len(ra)
                for _ in range(settings.resamples)
            ]
        )
    return cluster(mean_reward), cluster(pass_k), per_task


def test_every_interval_is_the_one_drawing_the_tasks_themselves_gives(tmp_path: Path) -> None:
    """The bootstrap adds up each task's figures worked out once, and draws with C-iterated
    ``random()`` calls: its intervals are exactly (not nearly) those of drawing the tasks and
    rewards themselves, for paired tasks, tasks only one run has, tasks with fewer than k
    rollouts, tasks with no finished rollout, and tasks every rollout of which got one reward."""
    rng = random.Random(11)

    def run_rewards(tasks: range) -> dict[int, list[float]]:
        rewards = {}
        for task in tasks:
            n = rng.choice([0, 1, 2, 3, 4])
            kind = task % 4
            if kind == 0:  # one same reward every time (both runs: no resampling needed)
                rewards[task] = [1.0] * n
            else:
                rewards[task] = [rng.choice([0.0, 0.25, 1.0]) for _ in range(n)]
        return rewards

    a, b = run_rewards(range(0, 50)), run_rewards(range(10, 60))
    run_a = write_run(tmp_path / "a", a, failures={t: 1 for t, r in a.items() if not r})
    run_b = write_run(tmp_path / "b", b, failures={t: 1 for t, r in b.items() if not r})
    settings = BootstrapSettings(resamples=300, confidence=0.9, seed=5)
    result = compare_runs(run_a, run_b, settings)
    row = only_row(result)
    reward_ci, pass_ci, per_task = _reference_intervals(a, b, 2, settings)
    assert row["reward_diff_ci"] == reward_ci
    assert row["pass_at_k"]["2"]["diff_ci"] == pass_ci
    shown = {r["task_index"]: r["reward_diff_ci"] for r in result["by_task"]}
    assert {t: shown[t] for t in per_task} == per_task
    assert any(ci is not None and ci[0] == ci[1] for ci in per_task.values())  # constant tasks
