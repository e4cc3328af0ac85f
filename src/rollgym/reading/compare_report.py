"""The terminal form of ``rollgym compare``: what differs in the configs; for two runs one table
per dispatch name and one of tasks; for more, one row per run with its difference from the
first; with ``--over``, reward and pass@k per policy version or step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from rollgym.reading.report import shown


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _diff(value: float | None, interval: list[float] | None, significant: bool) -> str:
    if value is None:
        return "-"
    text = f"{value:+.3f}"
    if interval is not None:
        text += f" [{interval[0]:+.3f}, {interval[1]:+.3f}]"
    return f"[bold]{text} *[/]" if significant else text


def _label(run: dict[str, Any]) -> str:
    return shown(run["run_id"] or run["path"])


def dispatch_table(result: dict[str, Any]) -> Table:
    """Mean reward of both runs per dispatch name with B - A, and pass@1 / pass@k of each."""
    confidence = round(result["confidence"] * 100)
    table = Table(
        title=f"A = {_label(result['run_a'])}, B = {_label(result['run_b'])}",
        caption=f"B - A with its {confidence}% bootstrap interval; * = the interval excludes 0 "
        "(pass@k intervals: --json)",
    )
    for column in ("dispatch name", "n A/B", "reward A", "reward B"):
        table.add_column(column, justify="left" if column == "dispatch name" else "right")
    table.add_column("B - A", justify="right", no_wrap=True)
    ks = sorted({k for row in result["by_dispatch"] for k in row["pass_at_k"]}, key=int)
    ks_shown = list(dict.fromkeys(ks[:1] + ks[-1:]))
    for k in ks_shown:
        table.add_column(f"pass@{k} A/B", justify="right", no_wrap=True)
    for row in result["by_dispatch"]:
        cells = [
            shown(row["dispatch_name"]),
            f"{row['completed_a']}/{row['completed_b']}",
            _fmt(row["reward_a"]),
            _fmt(row["reward_b"]),
            _diff(row["reward_diff"], row["reward_diff_ci"], row["significant"]),
        ]
        for k in ks_shown:
            entry = row["pass_at_k"].get(k)
            cells.append("-" if entry is None else f"{_fmt(entry['a'])}/{_fmt(entry['b'])}")
        table.add_row(*cells)
    return table


def task_table(result: dict[str, Any], max_tasks: int) -> Table | None:
    """The tasks that moved most: flagged ones first, then by the size of the difference."""
    rows = [row for row in result["by_task"] if row["reward_diff"] is not None]
    if not rows or max_tasks <= 0:
        return None
    rows.sort(key=lambda row: (not row["significant"], -abs(row["reward_diff"])))
    table = Table(title=f"tasks that moved most ({min(max_tasks, len(rows))} of {len(rows)})")
    for column in ("dispatch name", "task", "n A/B", "reward A", "reward B", "B - A"):
        table.add_column(column, justify="left" if column == "dispatch name" else "right")
    for row in rows[:max_tasks]:
        table.add_row(
            shown(row["dispatch_name"]),
            str(row["task_index"]),
            f"{row['n_a']}/{row['n_b']}",
            _fmt(row["reward_a"]),
            _fmt(row["reward_b"]),
            _diff(row["reward_diff"], row["reward_diff_ci"], row["significant"]),
        )
    return table


def _value(value: object) -> str:
    """A config value as one short line: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return shown(value)
    return shown(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


def config_table(differences: Sequence[dict[str, Any]], labels: Sequence[str]) -> Table | str:
    """The config keys whose values differ, one column per run; a line when none does."""
    if not differences:
        return "config.yaml: no differences (run id and output_dir aside)"
    table = Table(title="config differences (config.yaml)", min_width=36)
    table.add_column("key", no_wrap=True)
    for label in labels:
        table.add_column(label, overflow="fold")
    for entry in differences:
        present = entry.get("present") or [True] * len(entry["values"])
        table.add_row(
            shown(entry["key"]),
            *(
                _value(value) if here else "[dim](absent)[/]"
                for value, here in zip(entry["values"], present, strict=True)
            ),
        )
    return table


def print_comparison(
    result: dict[str, Any], max_tasks: int = 10, console: Console | None = None
) -> None:
    console = console or Console()
    console.print(config_table(result.get("config_differences") or [], ["A", "B"]))
    console.print(dispatch_table(result))
    tasks = task_table(result, max_tasks)
    if tasks is not None:
        console.print(tasks)
    flagged = [row["dispatch_name"] for row in result["by_dispatch"] if row["significant"]]
    verdict = ", ".join(flagged) if flagged else "none"
    console.print(f"mean reward differs beyond the interval for: {shown(verdict)}")


def _run_label(run: dict[str, Any]) -> str:
    """``#i`` with the run's step where it has one: the column and row name of a run."""
    step = run.get("step")
    return f"#{run['index']}" + ("" if step is None else f" step {shown(step)}")


def _lag(staleness: dict[str, Any]) -> str:
    """How many results ran behind the current version, and by at most how many."""
    behind, max_lag = staleness["behind"], staleness["max_lag"]
    return "-" if max_lag is None else f"{behind} (max {max_lag})"


def runs_table(result: dict[str, Any]) -> Table:
    """One row per run: counts, mean reward with its difference from the first, pass@k,
    staleness."""
    confidence = round(result["confidence"] * 100)
    ks = result["pass_at_k_shown"]
    table = Table(
        title="runs (#0 is the baseline)",
        caption=f"vs #0: the difference from #0 with its {confidence}% bootstrap interval; * = the interval excludes 0; "
        "behind: results whose oldest model call ran behind the current policy version "
        "(max: by how many versions); stale: failures refused by run.max_staleness",
    )
    table.add_column("run", no_wrap=True)
    for column in ("n", "failed", "reward", "vs #0", *(f"pass@{k}" for k in ks), "behind"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("stale", justify="right", no_wrap=True)
    for run in result["runs"]:
        delta = run["vs_first"]
        table.add_row(
            _run_label(run),
            str(run["completed"]),
            str(run["failed"]),
            _fmt(run["mean_reward"]),
            "-"
            if delta is None
            else _diff(delta["reward_diff"], delta["reward_diff_ci"], delta["significant"]),
            *(_fmt(run["pass_at_k"].get(k)) for k in ks),
            _lag(run["staleness"]),
            str(run["staleness"]["stale_failures"]),
        )
    return table


def print_many(result: dict[str, Any], console: Console | None = None) -> None:
    """``rollgym compare A B C ...``: the config differences, then one row per run."""
    console = console or Console()
    _print_head(result, console)
    console.print(runs_table(result))


def _print_head(result: dict[str, Any], console: Console) -> None:
    """What every comparison prints first: the config differences, then the runs' names."""
    labels = [_run_label(run) for run in result["runs"]]
    console.print(config_table(result["config_differences"], labels))
    _print_names(result["runs"], console)


def _print_names(runs: Sequence[dict[str, Any]], console: Console) -> None:
    """Which run each ``#i`` is: its run id and folder."""
    for run in runs:
        console.print(f"{_run_label(run)}: {shown(run['run_id'] or '-')}  {shown(run['path'])}")


def series_table(result: dict[str, Any]) -> Table:
    """Mean reward and pass@k at each policy version, or at each run's step."""
    over, ks = result["over"], result["pass_at_k_shown"]
    by_step = over == "step"
    table = Table(
        title="by run step (run.step, else the order given)"
        if by_step
        else "by policy version (of each rollout's first model call; all runs pooled)"
    )
    table.add_column(over, justify="right", no_wrap=True)
    table.add_column("runs", overflow="fold")
    for column in ("rollouts", "tasks", "mean reward", *(f"pass@{k}" for k in ks)):
        table.add_column(column, justify="right", no_wrap=True)
    if by_step:
        table.add_column("failed", justify="right")
        table.add_column("behind", justify="right", no_wrap=True)
    for point in result["points"]:
        x = point["x"]
        cells = [
            "none" if x is None else shown(x),
            ", ".join(f"#{index}" for index in point["runs"]),
            str(point["rollouts"]),
            str(point["tasks"]),
            _fmt(point["mean_reward"]),
            *(_fmt(point["pass_at_k"].get(k)) for k in ks),
        ]
        if by_step:
            cells += [str(point["failed"]), _lag(point["staleness"])]
        table.add_row(*cells)
    return table


def print_series(result: dict[str, Any], console: Console | None = None) -> None:
    """``rollgym compare RUN... --over version|step``: the config differences, the series."""
    console = console or Console()
    _print_head(result, console)
    console.print(series_table(result))
