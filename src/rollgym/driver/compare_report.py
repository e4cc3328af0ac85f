"""The terminal form of ``rollgym compare``: one table per dispatch name, one of tasks."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from rollgym.driver.report import shown


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


def print_comparison(
    result: dict[str, Any], max_tasks: int = 10, console: Console | None = None
) -> None:
    console = console or Console()
    console.print(dispatch_table(result))
    tasks = task_table(result, max_tasks)
    if tasks is not None:
        console.print(tasks)
    flagged = [row["dispatch_name"] for row in result["by_dispatch"] if row["significant"]]
    verdict = ", ".join(flagged) if flagged else "none"
    console.print(f"mean reward differs beyond the interval for: {shown(verdict)}")
