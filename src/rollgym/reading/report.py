"""The end-of-run report on the terminal: where the results are, and a table per dispatch name."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rollgym.driver.summary import CANCELLED, Summary
from rollgym.printable import printable


def shown(value: object) -> str:
    """Text from a config, input or a server as rich prints it inert: escaped by
    :func:`rollgym.printable.printable`, and its ``[...]`` not read as markup."""
    return escape(printable(value))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _rate(summary: Summary) -> str:
    if summary.rollouts_per_s is not None:
        return f"{summary.rollouts_per_s:.1f} rollouts/s"
    if summary.requested == 0:
        return "nothing ran: the input has no rows"
    if summary.failed:
        return (
            "nothing left to run: every rollout was recorded by an earlier session, "
            f"{summary.failed} as failed (run.retry_failed=true runs those again)"
        )
    return "nothing left to run: every rollout was recorded by an earlier session"


def nothing_left_line(summary: Summary) -> str | None:
    """One line when a resume found nothing left to run although failures are recorded: a
    rerun runs only what no session recorded, so it names the key that runs failures again.
    None otherwise."""
    if summary.rollouts_per_s is not None or not summary.requested or not summary.failed:
        return None
    return (
        f"rollgym: nothing left to run: all {summary.requested} rollouts were recorded by "
        f"earlier sessions, {summary.failed} of them as failed; to run the failed ones again, "
        "add run.retry_failed=true"
    )


def nothing_completed_line(summary: Summary) -> str | None:
    """One warning when a run that had rollouts to play completed none of them: every row
    failed, which is almost always the setup (an unknown agent, a dead server), not the
    policy. None otherwise (an interrupted run says how to resume instead)."""
    if summary.completed or not summary.failed or summary.status == "interrupted":
        return None
    kinds = ", ".join(f"{kind}: {n}" for kind, n in summary.failed_by_kind.items())
    where = f" (see {summary.output_dir}/failures.jsonl)" if summary.output_dir else ""
    return printable(
        f"rollgym: warning: no rollout completed; all {summary.failed} failed ({kinds}){where}"
    )


def summary_table(summary: Summary) -> Table:
    """completed / failed / mean reward / pass@1 / pass@k per dispatch name."""
    ks = sorted(
        {k for stats in summary.by_dispatch_name.values() for k in stats["pass_at_k"]}, key=int
    )
    last = ks[-1] if ks else "1"
    table = Table(title=f"run {shown(summary.run_id)} ({summary.status})")
    # cancelled by an interruption is not failed: a column of its own, never in pass@k
    cancelled = any(stats.get("cancelled") for stats in summary.by_dispatch_name.values())
    columns = ("dispatch name", "completed", "failed", "cancelled", "mean reward", "pass@1")
    for column in columns if cancelled else tuple(c for c in columns if c != "cancelled"):
        table.add_column(column, justify="left" if column == "dispatch name" else "right")
    if last != "1":
        table.add_column(f"pass@{last}", justify="right")
    for name, stats in summary.by_dispatch_name.items():
        stopped = stats.get("cancelled", 0)
        cells = [shown(name), str(stats["completed"]), str(stats["failed"] - stopped)]
        cells += [str(stopped)] if cancelled else []
        cells.append(_fmt(stats["mean_reward"]))
        cells.append(_fmt(stats["pass_at_k"].get("1")))
        if last != "1":
            cells.append(_fmt(stats["pass_at_k"].get(last)))
        table.add_row(*cells)
    return table


def telemetry_loss_line(summary: Summary) -> str | None:
    """One loud line when spans of the run did not surely reach the trace backend, else None."""
    from rollgym.telemetry.loss_report import loss_line

    line = loss_line(summary.telemetry)
    return None if line is None else printable(line)


def _restarts(name: str, server: dict[str, Any]) -> str:
    """``name: 2``, and for a server with replicas which of them: ``name: 2 (name@1: 2)``."""
    replicas = server.get("replicas") or {}
    which = ", ".join(
        f"{instance}: {entry['restarts']}"
        for instance, entry in replicas.items()
        if entry.get("deaths")
    )
    return f"{name}: {server['restarts']}" + (f" ({which})" if which else "")


def _accounting(summary: Summary) -> str:
    """``requested = completed + failed``, with the cancelled apart when an interruption
    cancelled some (they did not fail: a resume runs them)."""
    cancelled = summary.failed_by_kind.get(CANCELLED, 0)
    line = f"requested {summary.requested} = completed {summary.completed} + failed "
    if not cancelled:
        return line + str(summary.failed)
    return line + f"{summary.failed - cancelled} + cancelled {cancelled} (a resume runs them)"


def print_report(summary: Summary, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(summary))
    kinds = ", ".join(f"{kind}: {n}" for kind, n in summary.failed_by_kind.items()) or "none"
    kinds = printable(kinds)
    console.print(
        f"{_accounting(summary)} (failures by kind: {kinds}); {_rate(summary)}",
        markup=False,
        highlight=False,
    )
    restarts = [
        _restarts(name, server) for name, server in summary.servers.items() if server.get("deaths")
    ]
    if restarts:
        console.print(f"[yellow]server restarts[/]: {shown(', '.join(restarts))}", markup=True)
    for warning in summary.warnings:
        console.print(f"[yellow]warning[/]: {shown(warning)}")
    if summary.output_dir:
        console.print(
            f"results: {shown(summary.output_dir)}/ (rollouts.jsonl, failures.jsonl, summary.json)"
        )
