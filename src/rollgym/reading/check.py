"""``rollgym traces check``: verify the trace contract of TELEMETRY.md on a finished run.

Why a checker and not only tests: the contract (one small job trace, one bounded trace per
attempt linked to the job, isolation between rollouts, no orphans, every written result has its
trace) must hold on real runs at real concurrency, where a bug shows up as one stray span among
millions. Each rule is one small SQL query; a violation names the span, trace and rule.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import orjson

from rollgym.incarnations import read_incarnations
from rollgym.reading.counted_losses import CountedLosses
from rollgym.reading.cut_short import KILL_WINDOW_S, KilledRow, RunHistory
from rollgym.reading.engine_ids import rollout_of_engine_id
from rollgym.reading.queries import trace_exists
from rollgym.records import fields_record
from rollgym.session_records import OUTPUT_FILES, read_sessions
from rollgym.telemetry import names
from rollgym.tracestore.decode import hex_id

_MAX_LISTED = 50  # per rule; the count is always exact


class RunStory(TypedDict, total=False):
    """The run's history as ``traces check`` prints it: each session's index and status, the
    server processes that died mid-run, how many processes the servers had in all."""

    sessions: list[dict[str, object]]
    server_deaths: list[dict[str, object]]
    server_incarnations: int
    kill_window_s: float


@dataclass
class CheckReport:
    """Violations by rule, plus the facts a reader wants next to them."""

    violations: list[dict[str, object]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    largest_trace: dict[str, object] | None = None
    stats: dict[str, int] = field(default_factory=dict)
    #: Rows of a killed session (``kill -9``) recorded within the kill window before its
    #: last sign of life whose traces are absent: lost with the killed processes, not
    #: violations; listed (the first 50) with their session so a reader sees which.
    lost_with_killed_process: list[dict[str, object]] = field(default_factory=list)
    #: Gaps (absent parents, rootless traces, absent traces) that the spans the run's
    #: exporters counted lost (dropped or unknown) explain: counts, and the checks excused.
    counted_losses: dict[str, object] = field(default_factory=dict)
    #: Span checks excused because a killed session or a dead process cut their trace short,
    #: by what cut it (``session 0 (killed)``, ``agent@1 pid 42 (...) in session 1``).
    cut_short: dict[str, int] = field(default_factory=dict)
    #: The run's history as its records tell it: sessions (index, status) and the server
    #: processes that died mid-run.
    history: RunStory = field(default_factory=lambda: RunStory())

    def add_lost_with_killed_process(self, **where: object) -> None:
        self.stats["lost_with_killed_process"] = self.stats.get("lost_with_killed_process", 0) + 1
        if len(self.lost_with_killed_process) < _MAX_LISTED:
            self.lost_with_killed_process.append(where)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, rule: str, message: str, **where: object) -> None:
        self.counts[rule] = self.counts.get(rule, 0) + 1
        if self.counts[rule] <= _MAX_LISTED:
            self.violations.append({"rule": rule, "message": message, **where})

    def as_dict(self) -> dict[str, object]:
        """The report as ``traces check --json`` prints it: ``ok``, the counts, every field."""
        fields = fields_record(self, leave_out={"counts"})
        return {"ok": self.ok, "violation_counts": self.counts, **fields}


def check_run(run_dir: str | Path, conn: sqlite3.Connection) -> CheckReport:
    """Run every rule over the store ``conn`` and the run directory's output files."""
    report = CheckReport()
    sessions = read_sessions(Path(run_dir))
    killed_rows = _killed_rows(Path(run_dir), sessions)
    history = RunHistory(conn, sessions, read_incarnations(Path(run_dir)), killed_rows)
    report.history = _history(history)
    losses = CountedLosses.of_sessions(sessions)
    jobs = _check_job(conn, report, sessions)
    killed_jobs = {
        job
        for s in sessions
        if not s["ended"] and isinstance(job := s.get("job_trace_id"), str) and job
    }
    _check_dispatches(conn, report, jobs, killed_jobs, losses)
    if report.stats["dispatch_spans"]:
        _check_isolation(conn, report, history, losses)
    else:
        _check_isolation_without_dispatch(conn, report)
    has_dispatch = report.stats["dispatch_spans"] > 0
    _check_engine_spans(conn, report, history, losses, has_dispatch=has_dispatch)
    _check_parents(conn, history, losses)
    _check_outputs(
        Path(run_dir),
        conn,
        report,
        history,
        losses,
        killed_rows,
        require_ids=report.stats["dispatch_spans"] > 0,
    )
    _settle(report, losses)
    _largest(conn, report)
    report.cut_short = dict(history.cut)
    cut = sum(history.cut.values())
    if cut:
        report.stats["spans_in_traces_cut_short"] = cut
    return report


def _history(history: RunHistory) -> RunStory:
    """What ``traces check`` prints above its verdict: how each session ended, which server
    processes died mid-run (each restart is a new incarnation)."""
    return {
        "sessions": [
            {"index": s.get("index"), "status": s.get("status")} for s in history.sessions
        ],
        "server_deaths": [
            {"process": inc.label, "exit": inc.exit, "session": inc.session}
            for inc in history.incarnations
            if inc.died_at is not None
        ],
        "server_incarnations": len(history.incarnations),
        "kill_window_s": KILL_WINDOW_S,
    }


def _killed_rows(run_dir: Path, sessions: Sequence[Mapping[str, object]]) -> list[KilledRow]:
    """The rows of ``rollouts.jsonl`` and ``failures.jsonl`` that killed sessions wrote (a
    session's rows run from its start offset to the next session's)."""
    found: list[KilledRow] = []
    for file_name in OUTPUT_FILES:
        ranges = [
            (i, _offset(s, file_name), _next_offset(sessions, i, file_name))
            for i, s in enumerate(sessions)
            if not s["ended"]
        ]
        if not ranges:
            continue
        try:
            data = (run_dir / file_name).read_bytes()
        except OSError:
            continue
        offset = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            at, offset = offset, offset + len(line)
            session = next((i for i, start, end in ranges if start <= at < end), None)
            row = _json_line(line)
            if session is None or row is None:
                continue
            finished = row.get("finished_at")
            trace_id = row.get("trace_id")
            found.append(
                KilledRow(
                    session=session,
                    file=file_name,
                    line=number,
                    finished_at=float(finished) if isinstance(finished, int | float) else None,
                    trace_id=trace_id if isinstance(trace_id, str) and trace_id else None,
                    rollout_id=row.get("rollout_id"),
                )
            )
    return found


def _offset(session: Mapping[str, object], file_name: str) -> int:
    offsets = session.get("offsets")
    value = offsets.get(file_name, 0) if isinstance(offsets, dict) else 0
    return int(value)


def _next_offset(sessions: Sequence[Mapping[str, object]], index: int, file_name: str) -> int:
    later = sessions[index + 1 :]
    return _offset(later[0], file_name) if later else 1 << 62


def _check_job(
    conn: sqlite3.Connection, report: CheckReport, sessions: Sequence[Mapping[str, object]]
) -> set[tuple[bytes, bytes]]:
    """One ``gym.job`` per session that ended (a resumed run has one per session; a killed
    session's job span died unexported); returns the job spans found."""
    jobs = conn.execute(
        "SELECT trace_id, span_id FROM spans WHERE parent_span_id IS NULL AND name = ?",
        (names.SPAN_JOB,),
    ).fetchall()
    report.stats["job_traces"] = len(jobs)
    allowed = max(1, sum(1 for session in sessions if session["ended"]))
    if len(jobs) > allowed:
        report.add(
            "one_job_trace",
            f"{len(jobs)} {names.SPAN_JOB} roots in one run of {allowed} finished session(s)",
        )
    for trace_id, _span_id in jobs:
        for span_id, name, rollout_id in conn.execute(
            "SELECT span_id, name, rollout_id FROM spans WHERE trace_id = ? "
            "AND (rollout_id IS NOT NULL OR name IN (?, ?))",
            (trace_id, names.SPAN_DISPATCH, names.SPAN_ROLLOUT),
        ):
            report.add(
                "job_holds_no_rollout",
                f"span {name!r} (rollout {rollout_id}) sits in the job trace",
                trace_id=hex_id(trace_id),
                span_id=hex_id(span_id),
            )
    return {(trace_id, span_id) for trace_id, span_id in jobs}


def _check_dispatches(
    conn: sqlite3.Connection,
    report: CheckReport,
    jobs: set[tuple[bytes, bytes]],
    killed_jobs: set[str],
    losses: CountedLosses,
) -> None:
    has_job = report.stats["job_traces"] > 0
    rows = conn.execute(
        "SELECT d.trace_id, d.span_id, d.is_root, d.rollout_id, d.link_count, "
        "json_extract(s.attributes, ?) FROM dispatches d "
        "LEFT JOIN spans s ON s.trace_id = d.trace_id AND s.span_id = d.span_id",
        (f'$."{names.RUN_SESSION}"',),
    ).fetchall()
    report.stats["dispatch_spans"] = len(rows)
    # A dispatch is (rollout id, session): a rollout cancelled by Ctrl-C or lost with a
    # killed driver runs again, same id and attempt, in the next session.
    seen: set[tuple[str, object]] = set()
    sessions_of: dict[str, object] = {}
    rerun = 0
    targets: set[tuple[bytes, bytes] | None] = set()
    for trace_id, span_id, is_root, rollout_id, link_count, session in rows:
        where = {"trace_id": hex_id(trace_id), "span_id": hex_id(span_id), "rollout_id": rollout_id}
        if not is_root:
            report.add("dispatch_is_root", "dispatch span is not the root of its trace", **where)
        if rollout_id is not None:
            key = (rollout_id, session)
            if key in seen:
                in_session = f" in session {session}" if session is not None else ""
                report.add(
                    "one_dispatch_per_attempt",
                    f"attempt has two dispatch spans{in_session}",
                    **where,
                )
            seen.add(key)
            if sessions_of.setdefault(rollout_id, session) != session:
                rerun += 1
        if not has_job:
            _check_link_without_job(conn, report, trace_id, span_id, link_count, where, targets)
            continue
        if link_count != 1:
            report.add("dispatch_job_link", f"dispatch has {link_count} links, expected 1", **where)
        else:
            target = _link_target(conn, trace_id, span_id)
            if target in jobs or (target is not None and hex_id(target[0]) in killed_jobs):
                continue
            message = "dispatch link does not name the job span"
            if target is not None and not _span_exists(conn, *target):
                # the job span it names is absent (its session's export of it failed)
                losses.add("dispatch_job_link", message, target[0], where, absent_span=target[1])
            else:
                report.add("dispatch_job_link", message, **where)
    if rerun:
        report.stats["dispatches_rerun_in_a_later_session"] = rerun
    if len(targets) > 1:
        report.add(
            "dispatch_job_link",
            f"dispatches link to {len(targets)} different spans; a run has one job span",
        )


def _span_exists(conn: sqlite3.Connection, trace_id: bytes, span_id: bytes) -> bool:
    row = conn.execute(
        "SELECT 1 FROM spans WHERE trace_id = ? AND span_id = ?", (trace_id, span_id)
    ).fetchone()
    return row is not None


def _link_target(
    conn: sqlite3.Connection, trace_id: bytes, span_id: bytes
) -> tuple[bytes, bytes] | None:
    row = conn.execute(
        "SELECT linked_trace_id, linked_span_id FROM links WHERE trace_id=? AND span_id=?",
        (trace_id, span_id),
    ).fetchone()
    return (row[0], row[1]) if row is not None else None


def _check_link_without_job(
    conn: sqlite3.Connection,
    report: CheckReport,
    trace_id: bytes,
    span_id: bytes,
    link_count: int,
    where: Mapping[str, object],
    targets: set[tuple[bytes, bytes] | None],
) -> None:
    """No ``gym.job`` in the store: the ``per_rollout`` preset (no job span, so no link) or a
    sampled run whose job span the sampler dropped (each dispatch still links to it). Either
    way at most one link, and every linking dispatch names the same span."""
    if link_count > 1:
        report.add(
            "dispatch_job_link", f"dispatch has {link_count} links, expected at most 1", **where
        )
    elif link_count == 1:
        targets.add(_link_target(conn, trace_id, span_id))


#: Spans of a rollout outside that rollout's dispatch trace (trace, span, name, rollout, start).
_HOMELESS_SPANS = """SELECT s.trace_id, s.span_id, s.name, s.rollout_id, s.start_ns FROM spans s
    WHERE s.rollout_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM dispatches d WHERE d.trace_id = s.trace_id
        AND d.is_root = 1 AND d.rollout_id = s.rollout_id)"""
#: Spans whose parent is not in their trace (trace, span, name, parent, start).
_ORPHAN_SPANS = """SELECT s.trace_id, s.span_id, s.name, s.parent_span_id, s.start_ns FROM spans s
    WHERE s.parent_span_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM spans p WHERE p.trace_id = s.trace_id AND p.span_id = s.parent_span_id)"""


def _unexcused(
    conn: sqlite3.Connection, query: str, excused: Callable[[bytes, int], bool]
) -> Iterator[tuple[bytes, dict[str, object], str, Any]]:
    """The spans ``query`` finds (trace id, span id, name, one more column, start) that the
    run's history does not excuse (``excused(trace id, start)``: a killed session or a dead
    process cut their trace short): the trace id, where each is as a violation names it, its
    name and the column."""
    for trace_id, span_id, name, column, start_ns in conn.execute(query):
        if not excused(trace_id, start_ns):
            where: dict[str, object] = {"trace_id": hex_id(trace_id), "span_id": hex_id(span_id)}
            yield trace_id, where, name, column


def _check_isolation(
    conn: sqlite3.Connection, report: CheckReport, history: RunHistory, losses: CountedLosses
) -> None:
    homeless = _unexcused(conn, _HOMELESS_SPANS, history.excuses_homeless)
    for trace_id, where, name, rollout_id in homeless:
        message = f"span {name!r} of rollout {rollout_id} is not in that rollout's dispatch trace"
        where["rollout_id"] = rollout_id
        # in another rollout's trace: never a loss; its trace lost its dispatch root: a loss
        lost = not history.has_dispatch(trace_id)
        _add_misplaced(report, losses, "isolation", message, trace_id, where, lost=lost)


def _add_misplaced(
    report: CheckReport,
    losses: CountedLosses,
    rule: str,
    message: str,
    trace_id: bytes,
    where: Mapping[str, object],
    *,
    lost: bool,
) -> None:
    """A rollout's span outside that rollout's trace: a violation of ``rule``, or, when
    ``lost`` (its trace lost its dispatch root), a loss if the run counted one."""
    if lost:
        losses.add(rule, message, trace_id, where)
    else:
        report.add(rule, message, **where)


def _check_isolation_without_dispatch(conn: sqlite3.Connection, report: CheckReport) -> None:
    """The ``rollout`` group off: no dispatch roots to walk to, so isolation means no trace
    holds spans of two rollouts (and, checked with the job, none sits in the job trace)."""
    for trace_id, count, ids in conn.execute(
        """SELECT trace_id, COUNT(DISTINCT rollout_id), GROUP_CONCAT(DISTINCT rollout_id)
           FROM spans WHERE rollout_id IS NOT NULL GROUP BY trace_id
           HAVING COUNT(DISTINCT rollout_id) > 1"""
    ):
        report.add(
            "isolation",
            f"one trace holds spans of {count} rollouts ({str(ids)[:200]})",
            trace_id=hex_id(trace_id),
        )


def _sent_request_ids(conn: sqlite3.Connection) -> dict[str, str]:
    """Ids model servers sent upstream in another form (a UUID), mapped to their rollout."""
    key = f'$."{names.MODEL_UPSTREAM_REQUEST_ID}"'
    return {
        str(sent): rollout_id
        for sent, rollout_id in conn.execute(
            "SELECT json_extract(attributes, ?), rollout_id FROM spans "
            "WHERE rollout_id IS NOT NULL AND instr(attributes, ?) > 0",
            (key, names.MODEL_UPSTREAM_REQUEST_ID),
        )
        if sent is not None
    }


def _check_engine_spans(
    conn: sqlite3.Connection,
    report: CheckReport,
    history: RunHistory,
    losses: CountedLosses,
    *,
    has_dispatch: bool,
) -> None:
    """An engine span (vLLM's ``llm_request``) carries no ``gym.rollout.id``; its
    ``gen_ai.request.id`` names the rollout (see :mod:`~rollgym.reading.engine_ids`), and
    it must sit in that rollout's trace like any other span of the rollout."""
    sent = _sent_request_ids(conn)
    key = f'$."{names.GEN_AI_REQUEST_ID}"'
    attributed = unattributed = 0
    for trace_id, span_id, name, engine_id, start_ns in conn.execute(
        "SELECT trace_id, span_id, name, json_extract(attributes, ?), start_ns FROM spans "
        "WHERE instr(attributes, ?) > 0",
        (key, names.GEN_AI_REQUEST_ID),
    ):
        rollout_id = rollout_of_engine_id(str(engine_id), sent) if engine_id else None
        if rollout_id is None:
            unattributed += 1
            continue
        attributed += 1
        if has_dispatch:
            home = conn.execute(
                "SELECT 1 FROM dispatches WHERE trace_id = ? AND is_root = 1 AND rollout_id = ?",
                (trace_id, rollout_id),
            ).fetchone()
        else:
            home = not conn.execute(
                "SELECT 1 FROM spans WHERE trace_id = ? AND rollout_id IS NOT NULL "
                "AND rollout_id != ? LIMIT 1",
                (trace_id, rollout_id),
            ).fetchone()
        if not home and not history.excuses_homeless(trace_id, start_ns):
            message = (
                f"engine span {name!r} ({names.GEN_AI_REQUEST_ID} {engine_id!r}) names rollout "
                f"{rollout_id}, but its trace is not that rollout's"
            )
            where = {
                "trace_id": hex_id(trace_id),
                "span_id": hex_id(span_id),
                "rollout_id": rollout_id,
            }
            lost = has_dispatch and not history.has_dispatch(trace_id)
            _add_misplaced(report, losses, "engine_isolation", message, trace_id, where, lost=lost)
    report.stats["engine_spans_attributed"] = attributed
    if unattributed:
        report.stats["engine_spans_unattributed"] = unattributed


def _check_parents(conn: sqlite3.Connection, history: RunHistory, losses: CountedLosses) -> None:
    orphans = _unexcused(conn, _ORPHAN_SPANS, history.excuses_missing_parent)
    for trace_id, where, name, parent in orphans:
        message = f"span {name!r} names parent {hex_id(parent)}, absent from its trace"
        losses.add("missing_parent", message, trace_id, where, absent_span=parent)


def _settle(report: CheckReport, losses: CountedLosses) -> None:
    """The candidate gaps: excused together when the run's counted losses explain them all
    (:mod:`~rollgym.reading.counted_losses`), else every one a violation."""
    if not losses.candidates:
        return
    if losses.explained():
        report.counted_losses = losses.summary()
        report.stats["gaps_explained_by_counted_losses"] = len(losses.candidates)
        return
    counted = sum(losses.counted.values())
    why = (
        f" (at least {losses.spans_missing_at_least()} span(s) missing; the run's exporters "
        f"counted {counted} lost)"
    )
    for candidate in losses.candidates:
        report.add(candidate.rule, candidate.message + why, **candidate.where)


def _check_outputs(
    run_dir: Path,
    conn: sqlite3.Connection,
    report: CheckReport,
    history: RunHistory,
    losses: CountedLosses,
    killed_rows: Sequence[KilledRow],
    *,
    require_ids: bool,
) -> None:
    """Each written trace id is in the store; with dispatch spans, each result names one.

    Without dispatch spans (the ``rollout`` group off) an attempt whose driver opened no
    span at all (no ``http`` either) has no trace id to write, which is not a violation.
    A row of a killed session whose trace is absent is excused only when it was recorded
    within the kill window (:mod:`~rollgym.reading.cut_short`); it is then named apart.
    """
    killed = {(row.file, row.line): row for row in killed_rows}
    tail_sampled = _tail_sampled(run_dir)
    for file_name, rule in (
        ("rollouts.jsonl", "rollout_has_trace"),
        ("failures.jsonl", "failure_has_trace"),
    ):
        path = run_dir / file_name
        if not path.exists():
            continue
        checked = unsampled = 0
        with path.open("rb") as lines:
            for number, line in enumerate(lines, start=1):
                row = _json_line(line)
                if row is not None and row.get("trace_sampled") is False:
                    unsampled += 1  # the sampler dropped this trace: no store has it
                    trace_id = row.get("trace_id")
                    if tail_sampled and isinstance(trace_id, str) and trace_exists(conn, trace_id):
                        report.add(
                            "dropped_trace_removed",
                            f"{file_name}:{number} rollout {row.get('rollout_id')}: trace "
                            f"{trace_id} was dropped by tail sampling, yet spans of it are "
                            "in the store (half kept)",
                            trace_id=trace_id,
                        )
                    continue
                trace_id = row.get("trace_id") if row else None
                if row is None or not isinstance(trace_id, str) or not trace_id:
                    if rule == "rollout_has_trace" and row is not None and require_ids:
                        report.add(rule, f"{file_name}:{number} has no trace_id")
                    continue
                checked += 1
                if not trace_exists(conn, trace_id):
                    rollout_id = row.get("rollout_id")
                    message = (
                        f"{file_name}:{number} rollout {rollout_id} names trace {trace_id}, "
                        "absent from the store"
                    )
                    killed_row = killed.get((file_name, number))
                    if killed_row is None:  # an ended session: a loss, if one was counted
                        where = {"trace_id": trace_id, "rollout_id": rollout_id}
                        losses.add(rule, message, bytes.fromhex(trace_id), where)
                    elif history.within_kill_window(killed_row):
                        report.add_lost_with_killed_process(
                            file=file_name,
                            line=number,
                            trace_id=trace_id,
                            rollout_id=rollout_id,
                            session=killed_row.session,
                        )
                    else:
                        report.add(
                            rule,
                            f"{message}; recorded more than {KILL_WINDOW_S:g} s before session "
                            f"{killed_row.session} (killed) last showed life, so its spans "
                            "were due in the store",
                            trace_id=trace_id,
                            rollout_id=rollout_id,
                        )
        report.stats[f"{file_name}_checked"] = checked
        if unsampled:
            report.stats[f"{file_name}_unsampled"] = unsampled


def _tail_sampled(run_dir: Path) -> bool:
    """Whether the run's last session decided its traces at their end (``summary.json``'s
    ``telemetry.tail_sampling``): then a dropped trace must have left the store whole."""
    try:
        summary = orjson.loads((run_dir / "summary.json").read_bytes())
    except (OSError, ValueError):
        return False
    telemetry = summary.get("telemetry") if isinstance(summary, dict) else None
    return isinstance(telemetry, dict) and isinstance(telemetry.get("tail_sampling"), dict)


def _json_line(line: bytes) -> dict[str, object] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _largest(conn: sqlite3.Connection, report: CheckReport) -> None:
    row = conn.execute(
        "SELECT trace_id, COUNT(*) AS n FROM spans GROUP BY trace_id ORDER BY n DESC LIMIT 1"
    ).fetchone()
    report.stats["spans"] = conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0]
    if row is not None:
        root = conn.execute(
            "SELECT name FROM spans WHERE trace_id = ? AND parent_span_id IS NULL LIMIT 1",
            (row[0],),
        ).fetchone()
        report.largest_trace = {
            "trace_id": hex_id(row[0]),
            "spans": row[1],
            "root": root[0] if root else None,
        }
