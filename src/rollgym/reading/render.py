"""Human output of the ``rollgym traces`` commands (rich tables and trees).

Why separate from queries: the query functions return the exact dicts printed by ``--json``;
this module only decides how a person sees them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from rollgym.printable import printable
from rollgym.reading.check import CheckReport
from rollgym.reading.query_rows import RolloutDetail, RolloutsPage, SlowDispatch, SpanRow
from rollgym.telemetry import names

#: Attributes worth showing inline in a tree; everything else is in --json and the viewer.
_INLINE = (
    names.ROLLOUT_ID,
    names.ROLLOUT_OUTCOME,
    names.ROLLOUT_REWARD,
    names.HTTP_ROUTE,
    names.HTTP_RESPONSE_STATUS_CODE,
    names.ENV_TOOL_NAME,
    names.GEN_AI_REQUEST_MODEL,
    names.GEN_AI_USAGE_OUTPUT_TOKENS,
)


def safe(value: object) -> str:
    """``value`` as inert text for the console: what a terminal would act on shown as
    ``\\x1b``-style escapes (:func:`rollgym.printable.printable`), rich markup (``[bold]``, ``[link=...]``, ``[/]``) escaped.

    Everything printed from the store (ids, names, attribute values) was written by whoever
    could post OTLP, so none of it may reach the terminal as markup or escape sequences.
    """
    return escape(printable(value))


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def rollouts_table(console: Console, page: RolloutsPage) -> None:
    table = Table(
        title=f"rollouts {page['offset'] + 1}-{page['offset'] + len(page['rows'])} "
        f"of {page['total']}"
    )
    for column in ("rollout", "attempt", "dispatch", "outcome", "reward", "ms", "spans", "trace"):
        table.add_column(column, justify="right" if column in ("reward", "ms", "spans") else "left")
    for row in page["rows"]:
        table.add_row(
            safe(row["rollout_id"]),
            safe(row["attempt"]),
            safe(row["dispatch_name"]),
            safe(row["outcome"]),
            _fmt(row["reward"]),
            _fmt(row["duration_ms"], ".1f"),
            safe(row["span_count"]),
            safe(row["trace_id"]),
        )
    console.print(table)


def rollout_trees(console: Console, detail: RolloutDetail) -> None:
    if not detail["attempts"]:
        console.print(f"no dispatch for rollout {safe(repr(detail['rollout_id']))} in this store")
        return
    for attempt in detail["attempts"]:
        console.print(
            f"[bold]{safe(attempt['rollout_id'])}[/] attempt {safe(attempt['attempt'])} "
            f"outcome={safe(attempt['outcome'])} reward={_fmt(attempt['reward'])} "
            f"{_fmt(attempt['duration_ms'], '.1f')} ms  trace {safe(attempt['trace_id'])} "
            f"({attempt['span_count']} spans)"
        )
        console.print(trace_tree(attempt["spans"]))


def trace_tree(spans: Sequence[SpanRow]) -> Tree:
    """Indented tree of one trace; spans whose parent is absent hang under the root, marked."""
    by_id = {span["span_id"]: span for span in spans}
    children: dict[str | None, list[SpanRow]] = defaultdict(list)
    for span in spans:
        parent = span["parent_span_id"]
        children[parent if parent in by_id else None].append(span)
    origin = min((span["start_ns"] for span in spans), default=0)
    tree = Tree("trace")

    def add(node: Tree, span: SpanRow) -> None:
        orphan = span["parent_span_id"] and span["parent_span_id"] not in by_id
        branch = node.add(_label(span, origin) + (" [red](parent missing)[/]" if orphan else ""))
        for link in span["links"]:
            target = safe(link["name"]) if link["name"] else "span not in store"
            branch.add(
                f"[cyan]link -> {target}: trace {safe(link['trace_id'])} "
                f"span {safe(link['span_id'])}[/]"
            )
        for child in sorted(children.get(span["span_id"], []), key=lambda s: s["start_ns"]):
            add(branch, child)

    for root in sorted(children.get(None, []), key=lambda s: s["start_ns"]):
        add(tree, root)
    return tree


def _label(span: SpanRow, origin: int) -> str:
    inline = " ".join(
        f"{key}={safe(span['attributes'][key])}" for key in _INLINE if key in span["attributes"]
    )
    status = " [red]ERROR[/]" if span["status_code"] == 2 else ""
    return (
        f"[bold]{safe(span['name'])}[/] {span['duration_ms']:.2f} ms "
        f"[dim]@+{(span['start_ns'] - origin) / 1e6:.2f} ms[/]{status} [dim]{inline}[/]"
    )


def slowest_list(console: Console, items: Sequence[SlowDispatch]) -> None:
    for rank, item in enumerate(items, start=1):
        console.print(
            f"{rank:>3}. [bold]{safe(item['rollout_id'])}[/] {item['duration_ms']:.1f} ms "
            f"outcome={safe(item['outcome'])} dispatch={safe(item['dispatch_name'])} "
            f"spans={item['span_count']} trace {safe(item['trace_id'])}"
        )
        total = sum(item["self_time_ms"].values()) or 1.0
        console.print("       self time by span name (time no child span covers):")
        for name, ms in list(item["self_time_ms"].items())[:6]:
            console.print(f"       {ms:10.2f} ms {100 * ms / total:5.1f}%  {safe(name)}")


def profile_tables(console: Console, report: dict[str, Any]) -> None:
    """``traces profile``: the phase table (run and per dispatch name), stragglers, totals."""
    console.print(
        f"{report['dispatches']} dispatches, {report['wall_s']:.2f} s of rollout wall time "
        "(a phase owns an instant when its span is the innermost one there)"
    )
    groups = [("whole run", report["phases"])] + [
        (f"{safe(g['dispatch_name'])} ({g['dispatches']} dispatches)", g["phases"])
        for g in report["per_dispatch_name"]
    ]
    for title, phases in groups:
        table = Table(title=title, title_justify="left")
        for column in ("phase", "share", "seconds", "p50 s", "p90 s", "p99 s"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for row in phases:
            table.add_row(
                row["name"],
                f"{100 * row['share']:.1f}%",
                f"{row['seconds']:.3f}",
                f"{row['p50_s']:.4f}",
                f"{row['p90_s']:.4f}",
                f"{row['p99_s']:.4f}",
            )
        console.print(table)
    stragglers = Table(title="stragglers (slowest dispatches)", title_justify="left")
    for column in ("rollout", "seconds", "dominant phase", "dispatch", "outcome", "trace"):
        stragglers.add_column(column, justify="right" if column == "seconds" else "left")
    for row in report["stragglers"]:
        stragglers.add_row(
            safe(row["rollout_id"]),
            f"{row['duration_s']:.3f}",
            row["dominant_phase"],
            safe(row["dispatch_name"]),
            safe(row["outcome"]),
            safe(row["trace_id"]),
        )
    console.print(stragglers)
    staleness = report.get("staleness")
    if staleness:  # only a run whose model servers stamped policy versions
        lags = " ".join(f"lag {lag}: {n}" for lag, n in staleness["by_lag"].items())
        console.print(
            f"policy staleness: {staleness['dispatches']} dispatches with versions; {lags}; "
            f"{staleness['spanning']} ran under more than one version"
        )
    totals = report["accounting"]
    console.print(
        "accounting: "
        + " ".join(
            f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"
            for key, value in totals.items()
        )
    )


def check_report(console: Console, report: CheckReport) -> None:
    stats = report.stats
    console.print(
        f"spans={stats.get('spans', 0)} job_traces={stats.get('job_traces', 0)} "
        f"dispatch_spans={stats.get('dispatch_spans', 0)} "
        f"rollouts_checked={stats.get('rollouts.jsonl_checked', 0)} "
        f"failures_checked={stats.get('failures.jsonl_checked', 0)}"
    )
    if report.largest_trace:
        largest = report.largest_trace
        console.print(
            f"largest trace: {largest['spans']} spans ({safe(largest['root'])}) "
            f"{safe(largest['trace_id'])}"
        )
    _history_lines(console, report)
    if report.ok:
        console.print("[green]OK[/]: the trace contract holds")
        return
    for violation in report.violations:
        where = " ".join(
            f"{k}={safe(v)}" for k, v in violation.items() if k not in ("rule", "message") and v
        )
        console.print(
            f"[red]VIOLATION[/] {violation['rule']}: {safe(violation['message'])} {where}"
        )
    counts = ", ".join(f"{rule}={n}" for rule, n in report.counts.items())
    console.print(f"[red]FAILED[/]: {sum(report.counts.values())} violations ({counts})")


def _history_lines(console: Console, report: CheckReport) -> None:
    """The run's sessions and dead server processes, and what they explain: spans and rows
    lost or cut short by a process that died, counted per session and per process."""
    sessions = report.history.get("sessions", [])
    if len(sessions) > 1 or any(s.get("status") != "completed" for s in sessions):
        listed = ", ".join(f"{s.get('index')} {safe(str(s.get('status')))}" for s in sessions)
        console.print(f"sessions: {listed}")
    rerun = report.stats.get("dispatches_rerun_in_a_later_session", 0)
    if rerun:
        console.print(
            f"{rerun} dispatch(es) ran again in a later session (same rollout id and attempt, "
            f"{names.RUN_SESSION} tells them apart)"
        )
    deaths = report.history.get("server_deaths", [])
    if deaths:
        listed = "; ".join(
            f"{safe(str(d['process']))} ({safe(str(d['exit']))}) in session {d['session']}"
            for d in deaths
        )
        console.print(f"server processes that died mid-run: {listed}")
    lost = report.stats.get("lost_with_killed_process", 0)
    if lost:
        window = report.history.get("kill_window_s", 0)
        console.print(
            f"[yellow]lost with a killed session[/]: {lost} row(s) recorded within {window:g} s "
            "of its end name traces its processes held when they were killed (listed in "
            "--json); not contract violations"
        )
    losses = report.counted_losses
    if losses:
        counted = losses.get("spans_counted_lost")
        kinds = (
            ", ".join(f"{k}={v}" for k, v in counted.items()) if isinstance(counted, dict) else ""
        )
        excused = losses.get("checks_excused")
        per = (
            ", ".join(f"{k}: {v}" for k, v in excused.items()) if isinstance(excused, dict) else ""
        )
        console.print(
            f"[yellow]counted losses[/]: the run's exporters counted spans lost ({kinds}); "
            f"they explain {losses.get('spans_missing_at_least')} missing span(s) ({per}); "
            "losses, not contract violations"
        )
    if report.cut_short:
        per = ", ".join(f"{safe(label)}: {n}" for label, n in sorted(report.cut_short.items()))
        console.print(
            f"[yellow]cut short[/]: {sum(report.cut_short.values())} span check(s) hit traces "
            f"a dead process cut short ({per}); not contract violations"
        )
