"""``rollgym compare RUN_A RUN_B``: two runs side by side, with how sure the difference is.

Every experiment ends with "is B better than A?". This module answers it from the two output
directories alone (``rollouts.jsonl``, ``failures.jsonl``, ``config.yaml``), per dispatch name
and per task: mean reward and pass@k of each run, their difference ``B - A``, and a bootstrap
confidence interval of that difference. A difference is *flagged* when its interval excludes 0.

How the interval is drawn (a percentile bootstrap, the method evaluation harnesses use):

* **Per dispatch name** the unit resampled is the *task*, not the rollout: the repeats of one
  task are correlated (same prompt, same difficulty), so resampling rollouts would understate
  the spread. Tasks are matched by ``task_index`` (runs of the same input); when both runs
  have a task, it is resampled as a pair (a paired cluster bootstrap, which removes the
  between-task variance both runs share). Tasks only one run has are resampled with that
  run's side alone.
* **Per task** the rollouts of each run are resampled independently (the repeats of one task
  in one run are exchangeable; the two runs are independent samples).

Resampling is seeded (``seed``), so the same two runs always give the same intervals. The
files are only read, never repaired: comparing a run that is still going is safe, and a torn
last line (a run killed mid-write) is left for that run's own resume to cut.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

from rollgym.defaults import PASS_THRESHOLD
from rollgym.driver.output import FAILURES, ROLLOUTS
from rollgym.driver.summary import pass_at_k, reported_ks
from rollgym.errors import CompareError as CompareError
from rollgym.reading.config_diff import config_differences, flat_config, read_config
from rollgym.reading.run_reader import read_lines, recorded_run_id

#: The pass threshold of a run whose ``config.yaml`` does not say (the config's default).
DEFAULT_PASS_THRESHOLD = PASS_THRESHOLD


@dataclass
class TaskSamples:
    """The rewards of one task's finished rollouts in one run, and its failures."""

    rewards: list[float] = field(default_factory=list)
    failed: int = 0


@dataclass
class RunRecords:
    """What one run finished: ``{dispatch name: {task index: samples}}`` and its identity."""

    path: Path
    run_id: str | None
    pass_threshold: float
    by_dispatch: dict[str, dict[int, TaskSamples]]

    @property
    def completed(self) -> int:
        return sum(len(t.rewards) for tasks in self.by_dispatch.values() for t in tasks.values())

    @property
    def failed(self) -> int:
        return sum(t.failed for tasks in self.by_dispatch.values() for t in tasks.values())


def _run_config(run_dir: Path) -> tuple[str | None, float]:
    """The run id and pass threshold a run recorded (``run.json``, ``config.yaml``)."""
    threshold = DEFAULT_PASS_THRESHOLD
    run = read_config(run_dir).get("run")
    if isinstance(run, dict):
        value = run.get("pass_threshold")
        if isinstance(value, int | float) and not isinstance(value, bool):
            threshold = float(value)
    return recorded_run_id(run_dir), threshold


def _task_index(record: Mapping[str, object]) -> int | None:
    value = record.get("task_index")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_run_dir(run_dir: Path) -> None:
    """Refuse, in one line, a path that is not a run's output directory (no such directory,
    or one holding neither ``rollouts.jsonl`` nor ``failures.jsonl``): every way of
    comparing runs reads them only after this."""
    if not run_dir.is_dir():
        raise CompareError(f"{run_dir}: no such run directory")
    if not (run_dir / ROLLOUTS).exists() and not (run_dir / FAILURES).exists():
        raise CompareError(
            f"{run_dir}: holds no {ROLLOUTS} or {FAILURES}; is it a run's output_dir?"
        )


def read_run(run_dir: Path) -> RunRecords:
    """One run's finished rollouts and failures, grouped by dispatch name and task."""
    check_run_dir(run_dir)
    run_id, threshold = _run_config(run_dir)
    by_dispatch: dict[str, dict[int, TaskSamples]] = {}

    def samples(record: Mapping[str, object]) -> TaskSamples | None:
        name, task = record.get("dispatch_name"), _task_index(record)
        if not isinstance(name, str) or task is None:
            return None
        return by_dispatch.setdefault(name, {}).setdefault(task, TaskSamples())

    for record in read_lines(run_dir / ROLLOUTS):
        reward = record.get("reward")
        task = samples(record)
        if task is not None and isinstance(reward, int | float) and not isinstance(reward, bool):
            task.rewards.append(float(reward))
    for record in read_lines(run_dir / FAILURES):
        task = samples(record)
        if task is not None:
            task.failed += 1
    return RunRecords(run_dir, run_id, threshold, by_dispatch)


# --- statistics ------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def percentile_interval(draws: list[float], confidence: float) -> list[float] | None:
    """The central ``confidence`` share of the draws (sorted in place); None without draws."""
    if not draws:
        return None
    draws.sort()
    tail = (1.0 - confidence) / 2.0
    return [_percentile(draws, tail), _percentile(draws, 1.0 - tail)]


def _excludes_zero(interval: list[float] | None) -> bool:
    return interval is not None and (interval[0] > 0.0 or interval[1] < 0.0)


@dataclass(frozen=True)
class Statistic:
    """A statistic of one run's side of a resample: a ratio of sums over the tasks drawn.

    ``part`` gives each task's numerator and denominator (mean reward: its rewards' sum and
    count; pass@k: its pass@k and 1, or nothing for a task with fewer than k rollouts). A task's
    part is the same in every resample that draws it, so :func:`_cluster_bootstrap` works each
    one out once and a resample only adds up the parts of the tasks it drew (the bootstrap
    draws each task about a thousand times; working every drawn task out again made comparing
    runs of many tasks take minutes). The sums run over the drawn tasks in the order drawn,
    so every figure is the one summing the tasks' rewards in that order gives.
    """

    part: Callable[[TaskSamples], tuple[float, int]]

    def of(self, tasks: Iterable[TaskSamples]) -> float | None:
        """The statistic of ``tasks`` (None when no task counts: a denominator of 0)."""
        parts = [self.part(task) for task in tasks]
        return _ratio([p[0] for p in parts], [p[1] for p in parts])


def _ratio(numerators: Iterable[float], denominators: Iterable[int]) -> float | None:
    count = sum(denominators)
    return sum(numerators) / count if count else None


def _reward_part(task: TaskSamples) -> tuple[float, int]:
    return sum(task.rewards), len(task.rewards)


#: Mean reward over all rollouts of the tasks (as summary.json's mean reward).
MEAN_REWARD = Statistic(_reward_part)


def _pass_at(k: int, threshold: float) -> Statistic:
    """Mean pass@k over the tasks that have at least ``k`` rollouts."""

    def part(task: TaskSamples) -> tuple[float, int]:
        n = len(task.rewards)
        if n < k:
            return 0, 0  # adds nothing: x + 0 is x, so the sum is that of the tasks that count
        passed = sum(r >= threshold for r in task.rewards)
        return pass_at_k(n, passed, k), 1

    return Statistic(part)


@dataclass(frozen=True)
class BootstrapSettings:
    """How many resamples, at what confidence, from which seed."""

    resamples: int = 1000
    confidence: float = 0.95
    seed: int = 0


class _Side:
    """One run's tasks in the order a resample draws them from (the paired ones, then its
    own), each task's numerator and denominator worked out once."""

    def __init__(self, tasks: dict[int, TaskSamples], order: list[int], statistic: Statistic):
        parts = [statistic.part(tasks[i]) for i in order]
        self.numerators = [p[0] for p in parts]
        self.denominators = [p[1] for p in parts]

    def drawn(self, positions: list[int]) -> tuple[Iterator[float], Iterator[int]]:
        """The numerators and denominators of the tasks at ``positions``, in that order."""
        return (
            map(self.numerators.__getitem__, positions),
            map(self.denominators.__getitem__, positions),
        )


def _cluster_bootstrap(
    tasks_a: dict[int, TaskSamples],
    tasks_b: dict[int, TaskSamples],
    statistic_a: Statistic,
    statistic_b: Statistic,
    settings: BootstrapSettings,
) -> list[float] | None:
    """Interval of ``statistic_b(B) - statistic_a(A)`` resampling tasks (paired where shared).

    Draws positions exactly as ``rng.choices`` over the task lists would (it uses only their
    length), so the intervals are those of drawing the tasks themselves: the shared tasks as
    pairs, then each run's own."""
    draw = random.Random(settings.seed).random
    shared = sorted(tasks_a.keys() & tasks_b.keys())
    only_a = sorted(tasks_a.keys() - tasks_b.keys())
    only_b = sorted(tasks_b.keys() - tasks_a.keys())
    side_a = _Side(tasks_a, shared + only_a, statistic_a)
    side_b = _Side(tasks_b, shared + only_b, statistic_b)
    paired = len(shared)
    draws: list[float] = []
    for _ in range(settings.resamples):
        picked = _positions(draw, paired)
        picked_a = picked + _own(draw, paired, len(only_a))
        picked_b = picked + _own(draw, paired, len(only_b))
        a, b = _ratio(*side_a.drawn(picked_a)), _ratio(*side_b.drawn(picked_b))
        if a is not None and b is not None:
            draws.append(b - a)
    return percentile_interval(draws, settings.confidence)


def _positions(draw: Callable[[], float], n: int) -> list[int]:
    """``n`` positions drawn with replacement from ``range(n)``: what ``rng.choices`` draws
    (``floor(random() * n)``, one ``draw()`` each)."""
    floor, scale = math.floor, float(n)
    return [floor(draw() * scale) for _ in repeat(None, n)]


def _own(draw: Callable[[], float], after: int, n: int) -> list[int]:
    """``n`` positions drawn from ``range(after, after + n)`` (a run's own tasks)."""
    return [after + position for position in _positions(draw, n)]


def _mean_differences(
    rewards_a: list[float], rewards_b: list[float], draw: Callable[[], float], resamples: int
) -> list[float]:
    """``mean(B) - mean(A)`` of ``resamples`` resamples, each drawing ``len(B)`` rewards of B
    with replacement, then ``len(A)`` of A: the draws of ``rng.choices`` (``floor(draw() * n)``)
    without a call of it a side and resample (ten rollouts a side: 73 instead of 102 ns a draw;
    the whole comparison: ``python bench/compare_runs.py``)."""
    floor = math.floor
    n_a, n_b = len(rewards_a), len(rewards_b)
    scale_a, scale_b = float(n_a), float(n_b)
    differences = []
    for _ in range(resamples):
        sum_b = sum([rewards_b[floor(draw() * scale_b)] for _ in repeat(None, n_b)])
        sum_a = sum([rewards_a[floor(draw() * scale_a)] for _ in repeat(None, n_a)])
        differences.append(sum_b / n_b - sum_a / n_a)
    return differences


def _samples_bootstrap(
    rewards_a: list[float], rewards_b: list[float], settings: BootstrapSettings
) -> list[float] | None:
    """Interval of ``mean(B) - mean(A)`` resampling each run's rollouts independently.

    Two runs each of whose rollouts of the task got one same reward give that difference in
    every resample: it is worked out once (the many tasks every run solves, or fails, every
    time cost no resampling)."""
    if not rewards_a or not rewards_b:
        return None
    n_a, n_b = len(rewards_a), len(rewards_b)
    if min(rewards_a) == max(rewards_a) and min(rewards_b) == max(rewards_b):
        only = sum([rewards_b[0]] * n_b) / n_b - sum([rewards_a[0]] * n_a) / n_a
        return percentile_interval([only] * settings.resamples, settings.confidence)
    draw = random.Random(settings.seed).random
    draws = _mean_differences(rewards_a, rewards_b, draw, settings.resamples)
    return percentile_interval(draws, settings.confidence)


def _difference(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None else None


# --- the comparison --------------------------------------------------------------------------


def _dispatch_row(
    name: str, run_a: RunRecords, run_b: RunRecords, settings: BootstrapSettings
) -> dict[str, object]:
    tasks_a = run_a.by_dispatch.get(name, {})
    tasks_b = run_b.by_dispatch.get(name, {})
    reward_a, reward_b = MEAN_REWARD.of(tasks_a.values()), MEAN_REWARD.of(tasks_b.values())
    reward_ci = _cluster_bootstrap(tasks_a, tasks_b, MEAN_REWARD, MEAN_REWARD, settings)
    max_k = min(
        max((len(t.rewards) for t in tasks_a.values()), default=0),
        max((len(t.rewards) for t in tasks_b.values()), default=0),
    )
    pass_rows: dict[str, dict[str, Any]] = {}
    for k in reported_ks(max_k):
        stat_a, stat_b = _pass_at(k, run_a.pass_threshold), _pass_at(k, run_b.pass_threshold)
        value_a, value_b = stat_a.of(tasks_a.values()), stat_b.of(tasks_b.values())
        ci = _cluster_bootstrap(tasks_a, tasks_b, stat_a, stat_b, settings)
        pass_rows[str(k)] = {
            "a": value_a,
            "b": value_b,
            "diff": _difference(value_a, value_b),
            "diff_ci": ci,
            "significant": _excludes_zero(ci),
        }
    return {
        "dispatch_name": name,
        "completed_a": sum(len(t.rewards) for t in tasks_a.values()),
        "completed_b": sum(len(t.rewards) for t in tasks_b.values()),
        "failed_a": sum(t.failed for t in tasks_a.values()),
        "failed_b": sum(t.failed for t in tasks_b.values()),
        "tasks_a": len(tasks_a),
        "tasks_b": len(tasks_b),
        "paired_tasks": len(tasks_a.keys() & tasks_b.keys()),
        "reward_a": reward_a,
        "reward_b": reward_b,
        "reward_diff": _difference(reward_a, reward_b),
        "reward_diff_ci": reward_ci,
        "significant": _excludes_zero(reward_ci),
        "pass_at_k": pass_rows,
    }


def _task_rows(
    name: str, run_a: RunRecords, run_b: RunRecords, settings: BootstrapSettings
) -> Iterator[dict[str, Any]]:
    tasks_a = run_a.by_dispatch.get(name, {})
    tasks_b = run_b.by_dispatch.get(name, {})
    for task_index in sorted(tasks_a.keys() | tasks_b.keys()):
        a, b = tasks_a.get(task_index, TaskSamples()), tasks_b.get(task_index, TaskSamples())
        reward_a, reward_b = _mean(a.rewards), _mean(b.rewards)
        ci = _samples_bootstrap(a.rewards, b.rewards, settings)
        yield {
            "dispatch_name": name,
            "task_index": task_index,
            "n_a": len(a.rewards),
            "n_b": len(b.rewards),
            "failed_a": a.failed,
            "failed_b": b.failed,
            "reward_a": reward_a,
            "reward_b": reward_b,
            "reward_diff": _difference(reward_a, reward_b),
            "reward_diff_ci": ci,
            "significant": _excludes_zero(ci),
        }


def _run_header(run: RunRecords) -> dict[str, object]:
    return {
        "path": str(run.path),
        "run_id": run.run_id,
        "completed": run.completed,
        "failed": run.failed,
        "pass_threshold": run.pass_threshold,
    }


def check_settings(settings: BootstrapSettings) -> None:
    """Refuse resamples or a confidence no interval can be drawn with (one line each)."""
    if settings.resamples < 1:
        raise CompareError(f"--resamples must be at least 1, got {settings.resamples}")
    if not 0.0 < settings.confidence < 1.0:
        raise CompareError(f"--confidence must be between 0 and 1, got {settings.confidence}")


def compare_runs(
    run_a: Path, run_b: Path, settings: BootstrapSettings | None = None
) -> dict[str, object]:
    """The comparison of two run directories, as ``rollgym compare --json`` prints it; with
    the config keys whose values differ between them (``config_differences``)."""
    settings = settings or BootstrapSettings()
    check_settings(settings)
    a, b = read_run(run_a), read_run(run_b)
    names = sorted(a.by_dispatch.keys() | b.by_dispatch.keys())
    return {
        "run_a": _run_header(a),
        "run_b": _run_header(b),
        "config_differences": config_differences([flat_config(run_a), flat_config(run_b)]),
        "confidence": settings.confidence,
        "resamples": settings.resamples,
        "seed": settings.seed,
        "by_dispatch": [_dispatch_row(name, a, b, settings) for name in names],
        "by_task": [row for name in names for row in _task_rows(name, a, b, settings)],
    }
