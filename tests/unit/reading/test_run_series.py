"""Many runs at once: config differences, per-run figures, reward over version and step, on
hand-written run directories with known answers, and the command's words."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from rollgym.cli.main import main
from rollgym.reading.compare import BootstrapSettings, CompareError, compare_runs
from rollgym.reading.config_diff import config_differences, flatten
from rollgym.reading.run_series import compare_many, runs_over
from rollgym.reading.runs_page import offered_runs

FAST = BootstrapSettings(resamples=300, confidence=0.95, seed=3)


def write_run(
    root: Path,
    rollouts: list[tuple[int, float, list[Any], int | None]],
    *,
    config: dict[str, Any] | None = None,
    failures: Sequence[str] = (),
) -> Path:
    """A run folder: one rollout line per (task, reward, policy versions, lag), the failures'
    kinds, and a config.yaml (``run.run_id``/``output_dir`` filled in as the driver does)."""
    root.mkdir(parents=True)
    counts: dict[int, int] = {}
    lines = []
    for task, reward, versions, lag in rollouts:
        index = counts[task] = counts.get(task, -1) + 1
        lines.append(
            orjson.dumps(
                {
                    "rollout_id": f"{task}-{index}",
                    "task_index": task,
                    "rollout_index": index,
                    "dispatch_name": "solver",
                    "reward": reward,
                    "policy_versions": versions,
                    "policy_lag": lag,
                }
            )
        )
    (root / "rollouts.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    failed = [
        orjson.dumps({"task_index": 0, "dispatch_name": "solver", "error_kind": k})
        for k in failures
    ]
    (root / "failures.jsonl").write_bytes(b"".join(line + b"\n" for line in failed))
    full = {"run": {"run_id": root.name, "output_dir": str(root), **(config or {}).get("run", {})}}
    full.update({k: v for k, v in (config or {}).items() if k != "run"})
    (root / "config.yaml").write_text(yaml.safe_dump(full))
    (root / "summary.json").write_bytes(orjson.dumps({"run_id": root.name}))
    return root


def test_flatten_names_every_leaf_by_its_dotted_key() -> None:
    config = {
        "run": {"repeats": 2, "routes": {}},
        "servers": {"p": {"latency": {"s": 0.1}}},
        "l": [1],
    }
    assert flatten(config) == {
        "run.repeats": 2,
        "run.routes": {},
        "servers.p.latency.s": 0.1,
        "l": [1],
    }


def test_config_differences_keep_only_keys_that_differ_and_say_which_are_absent() -> None:
    found = config_differences(
        [{"a": 1, "b": [1, 2], "c": None}, {"a": 1, "b": [1, 3]}, {"a": 1, "b": [1, 2], "d": 0}]
    )
    assert found == [
        {"key": "b", "values": [[1, 2], [1, 3], [1, 2]]},
        {"key": "c", "values": [None, None, None], "present": [True, False, False]},
        {"key": "d", "values": [None, None, 0], "present": [False, False, True]},
    ]


def _three(tmp_path: Path) -> list[Path]:
    first = write_run(
        tmp_path / "r0",
        [(0, 0.0, [3], 0), (0, 1.0, [3, 4], 1), (1, 0.0, [4], 0), (1, 0.0, [4], 2)],
        config={"run": {"step": 10, "repeats": 2}, "servers": {"p": {"accuracy": 0.5}}},
        failures=["timeout"],
    )
    second = write_run(
        tmp_path / "r1",
        [(0, 1.0, [5], 0), (0, 1.0, [5], 0), (1, 1.0, [6], 0), (1, 0.0, [6], 1)],
        config={"run": {"step": 20, "repeats": 2}, "servers": {"p": {"accuracy": 0.9}}},
        failures=["stale", "stale"],
    )
    third = write_run(
        tmp_path / "r2",
        [(0, 1.0, [4], 0), (0, 1.0, [4], 0), (1, 1.0, [], None), (1, 1.0, [], None)],
        config={"run": {"step": 5, "repeats": 2}, "servers": {"p": {"accuracy": 0.9}}},
    )
    return [first, second, third]


def test_each_run_has_its_figures_staleness_and_difference_from_the_first(tmp_path: Path) -> None:
    result = compare_many(_three(tmp_path), FAST)
    assert [d["key"] for d in result["config_differences"]] == [
        "run.step",
        "servers.p.accuracy",
    ]
    first, second, third = result["runs"]
    assert (first["completed"], first["failed"], first["mean_reward"]) == (4, 1, 0.25)
    # pass@1: task 0 half right, task 1 never; pass@2: task 0 has a right one in two
    assert first["pass_at_k"] == {"1": 0.25, "2": 0.5}
    assert first["staleness"] == {
        "results_by_lag": {"0": 2, "1": 1, "2": 1},
        "max_lag": 2,
        "mean_lag": 0.75,
        "behind": 2,
        "stale_failures": 0,
    }
    assert first["vs_first"] is None
    assert second["staleness"]["stale_failures"] == 2
    assert second["failed_by_kind"] == {"stale": 2}
    delta = second["vs_first"]
    assert delta["reward_diff"] == pytest.approx(0.5)
    low, high = delta["reward_diff_ci"]
    assert low <= 0.5 <= high
    assert delta["pass_at_k_diff"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.5)}
    # a result with no version recorded has no lag: only the two versioned ones are counted
    assert third["staleness"]["results_by_lag"] == {"0": 2}
    assert third["versions"] == [4]


def test_the_interval_against_the_first_is_drawn_as_compare_draws_it(tmp_path: Path) -> None:
    first, second, _ = _three(tmp_path)
    extra = write_run(tmp_path / "r9", [(0, 1.0, [1], 0), (2, 0.0, [1], 0), (3, 1.0, [1], 0)])
    for other in (second, extra):  # the same tasks, and tasks only one run has
        many = compare_many([first, other], FAST)["runs"][1]["vs_first"]
        (row,) = compare_runs(first, other, FAST)["by_dispatch"]
        assert many["reward_diff_ci"] == row["reward_diff_ci"]
        assert many["significant"] == row["significant"]


def test_reward_over_version_pools_runs_at_each_first_call_version(tmp_path: Path) -> None:
    result = runs_over(_three(tmp_path), "version")
    points = {p["x"]: p for p in result["points"]}
    assert list(points) == [3, 4, 5, 6, None]  # integers in order, no version last
    # version 3: run 0's two task-0 rollouts (one began at 3 and ended at 4)
    assert (points[3]["rollouts"], points[3]["mean_reward"], points[3]["runs"]) == (2, 0.5, [0])
    assert points[3]["pass_at_k"] == {"1": 0.5, "2": 1.0}
    # version 4: run 0's task 1 (0, 0) and run 2's task 0 (1, 1): two tasks of two runs
    four = points[4]
    assert (four["rollouts"], four["tasks"], four["runs"]) == (4, 2, [0, 2])
    assert four["pass_at_k"] == {"1": 0.5, "2": 0.5}
    assert points[None]["rollouts"] == 2


def test_reward_over_step_orders_runs_by_their_step_else_keeps_the_order(tmp_path: Path) -> None:
    runs = _three(tmp_path)
    result = runs_over(runs, "step")
    assert [p["x"] for p in result["points"]] == [5, 10, 20]
    assert [p["runs"] for p in result["points"]] == [[2], [0], [1]]
    assert result["points"][1]["staleness"]["max_lag"] == 2
    unstepped = write_run(tmp_path / "r3", [(0, 1.0, [1], 0)])
    mixed = runs_over([runs[1], unstepped, runs[0]], "step")
    points = mixed["points"]
    assert [(p["x"], p["step_from"]) for p in points] == [
        (20, "run.step"),
        (1, "order"),
        (10, "run.step"),
    ]


def test_two_runs_keep_their_comparison_and_name_what_differs(tmp_path: Path) -> None:
    first, second, _ = _three(tmp_path)
    result = compare_runs(first, second, FAST)
    assert {"run_a", "run_b", "by_dispatch", "by_task"} <= result.keys()
    assert result["config_differences"] == [
        {"key": "run.step", "values": [10, 20]},
        {"key": "servers.p.accuracy", "values": [0.5, 0.9]},
    ]


def test_a_run_named_twice_or_missing_is_one_line(tmp_path: Path) -> None:
    first, second, _ = _three(tmp_path)
    with pytest.raises(CompareError, match="named twice"):
        compare_many([first, second, first], FAST)
    with pytest.raises(CompareError, match="no such run directory"):
        runs_over([first, tmp_path / "nope"], "step")
    (tmp_path / "not_a_run").mkdir()
    with pytest.raises(CompareError, match="holds no rollouts.jsonl or failures.jsonl"):
        runs_over([first, tmp_path / "not_a_run"], "step")


def test_the_command_takes_many_runs_and_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [str(p) for p in _three(tmp_path)]
    assert main(["compare", *runs, "--json", "--resamples", "50"]) == 0
    assert [r["run_id"] for r in orjson.loads(capsys.readouterr().out)["runs"]] == [
        "r0",
        "r1",
        "r2",
    ]
    assert main(["compare", *runs, "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    assert "servers.p.accuracy" in text and "#2 step 5" in text
    assert main(["compare", runs[0], "--over", "step"]) == 0
    assert "by run step" in capsys.readouterr().out
    assert main(["compare", runs[0]]) == 2
    assert capsys.readouterr().err.strip() == (
        "rollgym compare: give two or more runs (or one with --over version|step)"
    )


def test_the_runs_page_offers_run_folders_and_folders_of_runs(tmp_path: Path) -> None:
    first, second, third = _three(tmp_path / "all")
    (tmp_path / "all" / "empty").mkdir()
    nested = write_run(tmp_path / "deep" / "job" / "out", [(0, 1.0, [1], 0)])
    offered = offered_runs([second, None, tmp_path / "all", tmp_path / "deep"])
    assert offered == (second, first, third, nested)
