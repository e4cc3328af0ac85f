"""A run's groups read back from its files: ``traces profile``'s group lines, the viewer's
group view (``/api/groups``).

The spread itself is :class:`~rollgym.driver.group_spread.GroupSpread`, the same code that
writes ``summary.json``'s ``groups``; this module adds what a person looks at: each group's
members (rollout id, reward, or the failure that left it without one), to link to each rollout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from rollgym.driver.group_spread import GroupRow, GroupSpread
from rollgym.driver.output import FAILURES, ROLLOUTS
from rollgym.driver.run_record import RECORD_KEY
from rollgym.identity import is_int
from rollgym.reading.render import safe
from rollgym.reading.run_reader import read_lines

#: The members of one group a page lists (a group's repeats side by side are read at a glance
#: up to a few dozen; an evaluation's thousands of repeats of a task would make a page of
#: megabytes the browser cannot lay out): the rest are counted (``members_total``).
MEMBERS_SHOWN = 64


@dataclass(frozen=True)
class Member:
    """One rollout of a group, as the group view links to it."""

    rollout_id: str
    rollout_index: int
    reward: float | None
    outcome: str
    error_kind: str | None = None


@dataclass
class RunGroups:
    """A run's groups read from its files: the spread, and every group's members."""

    spread: GroupSpread
    dispatch_names: dict[int, str] = field(default_factory=dict)
    members: dict[int, list[Member]] = field(default_factory=dict)

    def page(
        self,
        offset: int,
        limit: int,
        zero_variance_only: bool = False,
        zero_variance_first: bool = False,
    ) -> dict[str, object]:
        """The summary plus one page of groups by task index (each with up to
        :data:`MEMBERS_SHOWN` of its members, by rollout index, and ``members_total``);
        ``zero_variance_first``: the zero-variance groups before the others. Members are
        gathered for the page's groups only: a run of 300,000 rollouts answers a page in
        milliseconds, not seconds."""
        rows = [row for row in self.spread.rows() if row["zero_variance"] or not zero_variance_only]
        if zero_variance_first:
            rows.sort(key=lambda row: not row["zero_variance"])
        return {
            **self.spread.summary(),
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "rows": [self._with_members(row) for row in rows[offset : offset + limit]],
        }

    def _with_members(self, row: GroupRow) -> dict[str, object]:
        members = sorted(self.members.get(row["task_index"], []), key=_by_index)
        return {
            **row,
            "dispatch_name": self.dispatch_names.get(row["task_index"]),
            "members": [vars(m) for m in members[:MEMBERS_SHOWN]],
            "members_total": len(members),
        }


def _by_index(member: Member) -> int:
    return member.rollout_index


def run_groups(run_dir: Path, size: int) -> RunGroups:
    """The groups of the run in ``run_dir`` from its ``rollouts.jsonl`` and ``failures.jsonl``
    (a failed member is listed, without a reward); ``size`` is the run's ``repeats``."""
    groups = RunGroups(GroupSpread(size))
    for record in read_lines(run_dir / ROLLOUTS):
        task, index, reward = (
            record.get("task_index"),
            record.get("rollout_index"),
            record.get("reward"),
        )
        if not (is_int(task) and is_int(index) and isinstance(reward, int | float)):
            continue
        groups.spread.add(task, float(reward))
        groups.dispatch_names[task] = str(record.get("dispatch_name"))
        groups.members.setdefault(task, []).append(
            Member(str(record.get("rollout_id")), index, float(reward), "ok")
        )
    for record in read_lines(run_dir / FAILURES):
        task, index = record.get("task_index"), record.get("rollout_index")
        if is_int(task) and is_int(index) and task in groups.members:
            groups.members[task].append(
                Member(
                    str(record.get("rollout_id")),
                    index,
                    None,
                    "failed",
                    str(record.get("error_kind")),
                )
            )
    return groups


def run_repeats(run_dir: Path) -> int:
    """The run's ``repeats`` as ``run.json`` records it (1 when it cannot be read)."""
    try:
        run = orjson.loads((run_dir / "run.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return 1
    defines = run.get(RECORD_KEY) if isinstance(run, dict) else None
    repeats = defines.get("repeats") if isinstance(defines, dict) else None
    return repeats if is_int(repeats) and repeats > 0 else 1


def print_groups(console: Console, report: Mapping[str, Any], shown: int) -> None:
    """``traces profile``'s group lines: the summary and up to ``shown`` zero-variance groups."""
    groups, zero = report.get("groups"), report.get("zero_variance")
    share = report.get("zero_variance_share")
    if not groups:
        console.print("groups: no completed rollout yet")
        return
    console.print(
        f"groups (the {report.get('size')} repeats of a task): {groups} with a reward; "
        f"{zero} zero-variance ({100 * float(share or 0):.1f}%: all rewards equal, "
        f"a group-relative advantage of 0); mean reward std {float(report.get('mean_std') or 0):.3f}; "
        f"{report.get('short_groups')} short of {report.get('size')} rewards (failed members)"
    )
    rows = report.get("rows")
    if not isinstance(rows, list) or not rows:
        return
    table = Table(
        title=f"groups ({len(rows[:shown])} of {report.get('total')})", title_justify="left"
    )
    for column in ("task", "dispatch", "n", "min", "max", "std", "zero variance"):
        table.add_column(column, justify="left" if column == "dispatch" else "right")
    for row in rows[:shown]:
        table.add_row(
            str(row["task_index"]),
            safe(row.get("dispatch_name")),
            str(row["n"]),
            f"{row['min']:.3f}",
            f"{row['max']:.3f}",
            f"{row['std']:.3f}",
            "yes" if row["zero_variance"] else "",
        )
    console.print(table)
