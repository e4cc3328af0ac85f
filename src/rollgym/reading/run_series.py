"""Many runs at once: what differs in their configs, each run's figures, and reward over time.

``rollgym compare A B`` says whether B beat A; a training loop makes many runs (an evaluation
every N steps, a sweep of one option) and asks three more questions, answered here from the run
directories alone, for ``rollgym compare RUN... [--over version|step]`` and the viewer's Runs
page (the same functions, so both show the same numbers):

* **What changed between them?** Each run keeps its resolved config in ``config.yaml`` (every
  default filled in, secrets redacted). The configs are flattened to dotted keys
  (``servers.policy.accuracy``) and the keys whose values are not all equal are the
  differences, the stated cause of a delta. ``run.run_id`` and ``run.output_dir`` always
  differ and say nothing, so they are left out.
* **How did each run do?** Per run: finished and failed rollouts, mean reward (failures never
  enter a mean), pass@k over tasks, staleness (results per policy lag, stale failures), and
  the difference from the first run given, mean reward with a bootstrap interval drawn the
  way ``rollgym compare`` draws it (tasks resampled, paired where both runs have them).
* **How does reward move over training?** ``over="version"``: every finished rollout is placed
  at the policy version its first model call ran under (``policy_versions[0]``: the weights it
  began with; a rollout without versions is placed at ``None``), pooled across the runs given.
  ``over="step"``: one point per run, at its ``run.step`` (the training step or checkpoint label
  it evaluates) or, where a run has none, at its position in the order given.

pass@k of a point is the mean over its tasks (a task is one run's input row of one dispatch
name) with at least k finished rollouts there, each at its run's ``run.pass_threshold``: a
task whose repeats ran under two versions counts at each with the repeats it has there.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rollgym.driver.output import FAILURES, ROLLOUTS
from rollgym.driver.summary import pass_at_k
from rollgym.json_types import JsonValue
from rollgym.reading.compare import (
    DEFAULT_PASS_THRESHOLD,
    BootstrapSettings,
    CompareError,
    TaskSamples,
    check_run_dir,
    check_settings,
    percentile_interval,
)
from rollgym.reading.config_diff import IGNORED_KEYS, config_differences, flatten, read_config
from rollgym.reading.run_reader import read_lines, recorded_run_id

#: The axes reward can be laid over.
Over = Literal["version", "step"]
OVERS: tuple[Over, ...] = ("version", "step")

#: (dispatch name, task index): one input row of one run.
TaskKey = tuple[str, int]


@dataclass(frozen=True)
class Finished:
    """One finished rollout: where it belongs, its reward, its version and its lag."""

    task: TaskKey
    reward: float
    version: int | str | None
    lag: int | None


@dataclass
class RunFacts:
    """What one run directory says about itself, read once."""

    path: Path
    run_id: str | None
    step: int | str | None
    pass_threshold: float
    config: dict[str, JsonValue]
    finished: list[Finished] = field(default_factory=list)
    failures_by_kind: Counter[str] = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return sum(self.failures_by_kind.values())

    def tasks(self) -> dict[TaskKey, TaskSamples]:
        """Rewards per task, with failures counted (the shape ``rollgym compare`` resamples)."""
        tasks: dict[TaskKey, TaskSamples] = {}
        for rollout in self.finished:
            tasks.setdefault(rollout.task, TaskSamples()).rewards.append(rollout.reward)
        return tasks


def _number(value: object) -> float | None:
    """The value as a float where it is a number (a bool is not), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _task_key(record: Mapping[str, object]) -> TaskKey | None:
    name, index = record.get("dispatch_name"), record.get("task_index")
    if not isinstance(name, str) or not isinstance(index, int) or isinstance(index, bool):
        return None
    return name, index


def _first_version(record: Mapping[str, object]) -> int | str | None:
    versions = record.get("policy_versions")
    if not isinstance(versions, list) or not versions:
        return None
    first = versions[0]
    return first if isinstance(first, int | str) and not isinstance(first, bool) else None


def read_run_facts(run_dir: Path) -> RunFacts:
    """One run's config, step, finished rollouts and failures (files only read, never fixed)."""
    check_run_dir(run_dir)
    config = read_config(run_dir)
    run = config.get("run")
    run_block = run if isinstance(run, dict) else {}
    threshold = _number(run_block.get("pass_threshold"))
    step = run_block.get("step")
    facts = RunFacts(
        path=run_dir,
        run_id=recorded_run_id(run_dir),
        step=step if isinstance(step, int | str) and not isinstance(step, bool) else None,
        pass_threshold=DEFAULT_PASS_THRESHOLD if threshold is None else threshold,
        config={k: v for k, v in flatten(config).items() if k not in IGNORED_KEYS},
    )
    for record in read_lines(run_dir / ROLLOUTS):
        task, reward, lag = (
            _task_key(record),
            _number(record.get("reward")),
            record.get("policy_lag"),
        )
        if task is None or reward is None:
            continue
        facts.finished.append(
            Finished(
                task=task,
                reward=reward,
                version=_first_version(record),
                lag=lag if isinstance(lag, int) and not isinstance(lag, bool) else None,
            )
        )
    for record in read_lines(run_dir / FAILURES):
        kind = record.get("error_kind")
        facts.failures_by_kind[kind if isinstance(kind, str) else "unknown"] += 1
    return facts


# --- figures ---------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pass_at(groups: Iterable[tuple[list[float], float]], k: int) -> float | None:
    """Mean unbiased pass@k over the groups (rewards, threshold) with at least k rewards."""
    scores = [
        pass_at_k(len(rewards), sum(r >= threshold for r in rewards), k)
        for rewards, threshold in groups
        if len(rewards) >= k
    ]
    return _mean(scores)


def common_k(runs: Sequence[RunFacts]) -> int:
    """The largest k every run can say pass@k for: the fewest repeats a run's tasks reach."""
    reached = [
        max((len(t.rewards) for t in run.tasks().values()), default=0)
        for run in runs
        if run.finished
    ]
    return max(1, min(reached, default=1))


def _ks(k_max: int) -> list[int]:
    return sorted({1, k_max})


def staleness(run: RunFacts) -> dict[str, object]:
    """How far behind each result's oldest model call was (``summary.json``'s staleness, read
    from the rollouts so a run still going has it too), and the results that were behind."""
    by_lag = Counter(str(f.lag) for f in run.finished if f.lag is not None)
    lags = [f.lag for f in run.finished if f.lag is not None]
    return {
        "results_by_lag": dict(sorted(by_lag.items(), key=lambda item: int(item[0]))),
        "max_lag": max(lags, default=None),
        "mean_lag": _mean([float(lag) for lag in lags]),
        "behind": sum(1 for lag in lags if lag > 0),
        "stale_failures": run.failures_by_kind.get("stale", 0),
    }


def _versions(run: RunFacts) -> list[int | str]:
    seen = {f.version for f in run.finished if f.version is not None}
    return sorted(seen, key=_version_order)


def _version_order(version: int | str | None) -> tuple[int, float, str]:
    """Integers in order, then labels in text order, then no version."""
    if version is None:
        return (2, 0.0, "")
    if isinstance(version, int):
        return (0, float(version), "")
    return (1, 0.0, version)


def run_figures(run: RunFacts, ks: Sequence[int]) -> dict[str, object]:
    """One run's row: who it is, its counts, mean reward, pass@k and staleness."""
    groups = [(t.rewards, run.pass_threshold) for t in run.tasks().values()]
    return {
        "path": str(run.path),
        "run_id": run.run_id,
        "step": run.step,
        "completed": len(run.finished),
        "failed": run.failed,
        "failed_by_kind": dict(sorted(run.failures_by_kind.items())),
        "tasks": len(groups),
        "pass_threshold": run.pass_threshold,
        "mean_reward": _mean([f.reward for f in run.finished]),
        "pass_at_k": {str(k): pass_at(groups, k) for k in ks},
        "versions": _versions(run),
        "staleness": staleness(run),
    }


def _totals(
    tasks: Mapping[TaskKey, TaskSamples], keys: Sequence[TaskKey]
) -> tuple[list[float], list[int]]:
    return [sum(tasks[k].rewards) for k in keys], [len(tasks[k].rewards) for k in keys]


def reward_interval(
    tasks_a: Mapping[TaskKey, TaskSamples],
    tasks_b: Mapping[TaskKey, TaskSamples],
    settings: BootstrapSettings,
) -> list[float] | None:
    """The interval of ``mean reward(B) - mean reward(A)`` over all tasks of both runs, drawn
    exactly as ``rollgym compare`` draws a dispatch row's (tasks resampled, paired where both
    runs have one, the same seeded draws), on each task's reward sum and count: a many-run
    comparison of large runs resamples every task of every run a thousand times."""
    rng = random.Random(settings.seed)
    shared = sorted(tasks_a.keys() & tasks_b.keys())
    only_a = sorted(tasks_a.keys() - tasks_b.keys())
    only_b = sorted(tasks_b.keys() - tasks_a.keys())
    shared_a, shared_b = _totals(tasks_a, shared), _totals(tasks_b, shared)
    alone_a, alone_b = _totals(tasks_a, only_a), _totals(tasks_b, only_b)

    def drawn(totals: tuple[list[float], list[int]], picked: list[int]) -> tuple[float, int]:
        sums, counts = totals
        return sum(map(sums.__getitem__, picked)), sum(map(counts.__getitem__, picked))

    draws: list[float] = []
    for _ in range(settings.resamples):
        picked = rng.choices(range(len(shared)), k=len(shared)) if shared else []
        (sum_a, n_a), (sum_b, n_b) = drawn(shared_a, picked), drawn(shared_b, picked)
        if only_a:
            more, extra = drawn(alone_a, rng.choices(range(len(only_a)), k=len(only_a)))
            sum_a, n_a = sum_a + more, n_a + extra
        if only_b:
            more, extra = drawn(alone_b, rng.choices(range(len(only_b)), k=len(only_b)))
            sum_b, n_b = sum_b + more, n_b + extra
        if n_a and n_b:
            draws.append(sum_b / n_b - sum_a / n_a)
    return percentile_interval(draws, settings.confidence)


def len_failed(row: Mapping[str, object]) -> int:
    """A run row's count of failed rollouts."""
    failed = row["failed"]
    return failed if isinstance(failed, int) else 0


def _delta(
    first: dict[str, object],
    row: dict[str, object],
    tasks: tuple[dict[TaskKey, TaskSamples], dict[TaskKey, TaskSamples]],
    settings: BootstrapSettings,
) -> dict[str, object]:
    def minus(a: object, b: object) -> float | None:
        x, y = _number(a), _number(b)
        return y - x if x is not None and y is not None else None

    interval = reward_interval(*tasks, settings)
    pass_a, pass_b = first["pass_at_k"], row["pass_at_k"]
    assert isinstance(pass_a, dict) and isinstance(pass_b, dict)
    return {
        "reward_diff": minus(first["mean_reward"], row["mean_reward"]),
        "reward_diff_ci": interval,
        "significant": interval is not None and (interval[0] > 0.0 or interval[1] < 0.0),
        "pass_at_k_diff": {k: minus(pass_a.get(k), pass_b.get(k)) for k in pass_b},
        "failed_diff": len_failed(row) - len_failed(first),
    }


def read_runs(run_dirs: Sequence[Path]) -> list[RunFacts]:
    """Every run named, each read once; a path named twice is one mistake, said so."""
    seen: set[Path] = set()
    for path in run_dirs:
        resolved = path.resolve()
        if resolved in seen:
            raise CompareError(f"{path}: named twice")
        seen.add(resolved)
    return [read_run_facts(path) for path in run_dirs]


def compare_many(
    run_dirs: Sequence[Path], settings: BootstrapSettings | None = None
) -> dict[str, object]:
    """Every run's figures, the config keys that differ, and each run's difference from the
    first (``rollgym compare A B C ... --json``)."""
    settings = settings or BootstrapSettings()
    check_settings(settings)
    runs = read_runs(run_dirs)
    return compare_facts(runs, settings)


def compare_facts(runs: Sequence[RunFacts], settings: BootstrapSettings) -> dict[str, object]:
    """:func:`compare_many` on runs already read."""
    ks = _ks(common_k(runs))
    rows = [run_figures(run, ks) for run in runs]
    first_tasks = runs[0].tasks() if runs else {}
    for index, (run, row) in enumerate(zip(runs, rows, strict=True)):
        row["index"] = index
        row["vs_first"] = (
            None if index == 0 else _delta(rows[0], row, (first_tasks, run.tasks()), settings)
        )
    return {
        "baseline": rows[0]["run_id"] if rows else None,
        "confidence": settings.confidence,
        "resamples": settings.resamples,
        "seed": settings.seed,
        "pass_at_k_shown": [str(k) for k in ks],
        "config_differences": config_differences([run.config for run in runs]),
        "runs": rows,
    }


# --- over version or step ---------------------------------------------------------------------


def _point(
    finished: Sequence[tuple[int, Finished]], runs: Sequence[RunFacts], ks: Sequence[int]
) -> dict[str, object]:
    """Mean reward and pass@k of the rollouts given (each with its run's index)."""
    groups: dict[tuple[int, TaskKey], list[float]] = {}
    for index, rollout in finished:
        groups.setdefault((index, rollout.task), []).append(rollout.reward)
    pairs = [(rewards, runs[index].pass_threshold) for (index, _), rewards in groups.items()]
    return {
        "rollouts": len(finished),
        "tasks": len(groups),
        "mean_reward": _mean([rollout.reward for _, rollout in finished]),
        "pass_at_k": {str(k): pass_at(pairs, k) for k in ks},
    }


def _step_order(runs: Sequence[RunFacts]) -> list[tuple[int | str, int]]:
    """Each run's place on the step axis, and its index: ``run.step`` where every run has an
    integer one (sorted by it), else the order given (a run's label kept for the reader)."""
    steps = [run.step for run in runs]
    if steps and all(isinstance(s, int) for s in steps):
        return sorted(((s, i) for i, s in enumerate(steps) if s is not None), key=lambda p: p[0])
    return [(s if s is not None else i, i) for i, s in enumerate(steps)]


def series_of(runs: Sequence[RunFacts], over: Over) -> dict[str, object]:
    """Reward and pass@k at each policy version (all runs pooled) or at each run's step."""
    ks = _ks(common_k(runs))
    points: list[dict[str, object]] = []
    if over == "version":
        by_version: dict[int | str | None, list[tuple[int, Finished]]] = {}
        for index, run in enumerate(runs):
            for rollout in run.finished:
                by_version.setdefault(rollout.version, []).append((index, rollout))
        for version in sorted(by_version, key=_version_order):
            members = by_version[version]
            points.append(
                {
                    "x": version,
                    "runs": sorted({i for i, _ in members}),
                    **_point(members, runs, ks),
                }
            )
    else:
        for place, index in _step_order(runs):
            run = runs[index]
            points.append(
                {
                    "x": place,
                    "step_from": "run.step" if run.step is not None else "order",
                    "runs": [index],
                    **_point([(index, f) for f in run.finished], runs, ks),
                    "failed": run.failed,
                    "staleness": staleness(run),
                }
            )
    return {"over": over, "pass_at_k_shown": [str(k) for k in ks], "points": points}


def runs_over(run_dirs: Sequence[Path], over: Over) -> dict[str, object]:
    """``rollgym compare RUN... --over version|step --json``: the runs, what differs in their
    configs, and the series."""
    if over not in OVERS:
        raise CompareError(f"--over must be one of {', '.join(OVERS)}, got {over!r}")
    runs = read_runs(run_dirs)
    return {
        "runs": [
            {"index": i, "path": str(r.path), "run_id": r.run_id, "step": r.step}
            for i, r in enumerate(runs)
        ],
        "config_differences": config_differences([run.config for run in runs]),
        **series_of(runs, over),
    }
