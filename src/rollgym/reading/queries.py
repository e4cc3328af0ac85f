"""Read-side queries over a trace store, shared by the CLI and the viewer's JSON API.

Why one module: ``rollgym traces ls`` and the viewer's table must show the same numbers, so
both call these functions. Every query a person waits for goes through an index (dispatches by
start/duration/rollout id, spans by trace id); only ``check`` scans. Results are plain dicts
with hex ids so ``--json`` output and the API are the same shape.
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import orjson

from rollgym.reading.query_rows import (
    AttemptDetail,
    DispatchRow,
    LinkRow,
    RolloutDetail,
    RolloutsPage,
    SlowDispatch,
    SpanRow,
)
from rollgym.telemetry import names
from rollgym.tracestore.decode import hex_id, id_bytes

DB_NAME = "traces.db"
SORT_COLUMNS = {
    "start": "d.start_ns",
    "duration": "d.duration_ns",
    "reward": "d.reward",
    "rollout_id": "d.rollout_id",
    "outcome": "d.outcome",
    "dispatch_name": "d.dispatch_name",
}
_ATTEMPT_SUFFIX = re.compile(r"-a\d+$")
#: Dispatch rows with the size of their trace, as :func:`_dispatch` reads them.
_DISPATCHES_WITH_SPAN_COUNT = (
    "SELECT d.*, (SELECT COUNT(*) FROM spans s WHERE s.trace_id = d.trace_id) AS span_count "
    "FROM dispatches d"
)


def db_path_of(target: str | Path) -> Path:
    """A run directory (holding ``traces.db``) or a database file itself."""
    path = Path(target)
    return path / DB_NAME if path.is_dir() else path


def base_rollout_id(rollout_id: str) -> str:
    """``3-0-a2`` -> ``3-0``: the id every attempt of a rollout shares."""
    return _ATTEMPT_SUFFIX.sub("", rollout_id)


#: The keywords of :func:`list_rollouts` that choose its page: ``traces ls``'s options.
PAGE_KEYS = (
    "limit",
    "offset",
    "outcome",
    "dispatch_name",
    "min_reward",
    "max_reward",
    "min_duration_ms",
    "max_duration_ms",
    "sort",
    "descending",
)


def list_rollouts(
    conn: sqlite3.Connection,
    *,
    limit: int = 50,
    offset: int = 0,
    outcome: str | None = None,
    dispatch_name: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    min_duration_ms: float | None = None,
    max_duration_ms: float | None = None,
    sort: str = "start",
    descending: bool = False,
) -> RolloutsPage:
    """One page of dispatches (one per attempt) with span counts; ``total`` counts the filter."""
    where, params = _filters(
        outcome, dispatch_name, min_reward, max_reward, min_duration_ms, max_duration_ms
    )
    order = SORT_COLUMNS.get(sort)
    if order is None:
        raise ValueError(f"unknown sort {sort!r}; one of {', '.join(SORT_COLUMNS)}")
    direction = "DESC" if descending else "ASC"
    total = conn.execute(f"SELECT COUNT(*) FROM dispatches d {where}", params).fetchone()[0]
    rows = conn.execute(
        f"""{_DISPATCHES_WITH_SPAN_COUNT} {where}
            ORDER BY {order} {direction}, d.rowid {direction} LIMIT ? OFFSET ?""",
        [*params, int(limit), int(offset)],
    ).fetchall()
    return {"total": total, "limit": limit, "offset": offset, "rows": [_dispatch(r) for r in rows]}


def _filters(
    outcome: str | None,
    dispatch_name: str | None,
    min_reward: float | None,
    max_reward: float | None,
    min_duration_ms: float | None,
    max_duration_ms: float | None,
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    for clause, value in (
        ("d.outcome = ?", outcome),
        ("d.dispatch_name = ?", dispatch_name),
        ("d.reward >= ?", min_reward),
        ("d.reward <= ?", max_reward),
        ("d.duration_ns >= ?", None if min_duration_ms is None else int(min_duration_ms * 1e6)),
        ("d.duration_ns <= ?", None if max_duration_ms is None else int(max_duration_ms * 1e6)),
    ):
        if value is not None and value != "":
            clauses.append(clause)
            params.append(value)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def _hex(raw: bytes) -> str:
    """A NOT NULL id column as hex (``hex_id`` is for the nullable ones)."""
    return raw.hex()


def _dispatch(row: sqlite3.Row) -> DispatchRow:
    keys = row.keys()
    return {
        "rollout_id": row["rollout_id"],
        "attempt": row["attempt"],
        "dispatch_name": row["dispatch_name"],
        "outcome": row["outcome"],
        "reward": row["reward"],
        "duration_ms": row["duration_ns"] / 1e6,
        "start_ns": row["start_ns"],
        "span_count": row["span_count"] if "span_count" in keys else None,
        "trace_id": _hex(row["trace_id"]),
        "span_id": _hex(row["span_id"]),
        "is_root": bool(row["is_root"]),
        "link_count": row["link_count"],
        "run_id": row["run_id"],
    }


def rollout_attempts(conn: sqlite3.Connection, rollout_id: str) -> list[DispatchRow]:
    """Every attempt's dispatch of a rollout (``X``, ``X-a1``, ...), oldest first."""
    base = base_rollout_id(rollout_id)
    rows = conn.execute(
        f"""{_DISPATCHES_WITH_SPAN_COUNT}
            WHERE d.rollout_id = ? OR (d.rollout_id >= ? AND d.rollout_id < ?)
            ORDER BY d.start_ns""",
        (base, base + "-a0", base + "-a:"),
    ).fetchall()
    pattern = re.compile(re.escape(base) + r"(-a\d+)?$")
    return [_dispatch(r) for r in rows if pattern.match(r["rollout_id"] or "")]


def trace_spans(conn: sqlite3.Connection, trace_id: str | bytes) -> list[SpanRow]:
    """All spans of a trace, oldest first, with attributes, events, links and resource."""
    raw = trace_id if isinstance(trace_id, bytes) else id_bytes(trace_id)
    links: dict[bytes, list[LinkRow]] = defaultdict(list)
    for link in conn.execute(
        "SELECT span_id, linked_trace_id, linked_span_id, attributes FROM links "
        "WHERE trace_id = ? ORDER BY span_id, idx",
        (raw,),
    ):
        target = conn.execute(
            "SELECT name FROM spans WHERE trace_id = ? AND span_id = ?",
            (link["linked_trace_id"], link["linked_span_id"]),
        ).fetchone()
        links[link["span_id"]].append(
            {
                "name": target[0] if target else None,
                "trace_id": _hex(link["linked_trace_id"]),
                "span_id": _hex(link["linked_span_id"]),
                "attributes": orjson.loads(link["attributes"]) if link["attributes"] else {},
            }
        )
    rows = conn.execute(
        """SELECT s.*, r.attributes AS resource, r.service_name AS service_name
           FROM spans s LEFT JOIN resources r ON r.id = s.resource_id
           WHERE s.trace_id = ? ORDER BY s.start_ns""",
        (raw,),
    ).fetchall()
    return [_span(row, links.get(row["span_id"], [])) for row in rows]


def _span(row: sqlite3.Row, links: list[LinkRow]) -> SpanRow:
    return {
        "trace_id": _hex(row["trace_id"]),
        "span_id": _hex(row["span_id"]),
        "parent_span_id": hex_id(row["parent_span_id"]),
        "name": row["name"],
        "kind": row["kind"],
        "start_ns": row["start_ns"],
        "end_ns": row["end_ns"],
        "duration_ms": max(0, row["end_ns"] - row["start_ns"]) / 1e6,
        "status_code": row["status_code"],
        "status_message": row["status_message"],
        "rollout_id": row["rollout_id"],
        "service_name": row["service_name"],
        "attributes": orjson.loads(row["attributes"]),
        "events": orjson.loads(row["events"]) if row["events"] else [],
        "links": links,
        "resource": orjson.loads(row["resource"]) if row["resource"] else {},
    }


def rollout_detail(conn: sqlite3.Connection, rollout_id: str) -> RolloutDetail:
    """What ``show`` prints: every attempt with its spans (a dispatch's link names its job)."""
    attempts: list[AttemptDetail] = []
    for attempt in rollout_attempts(conn, rollout_id):
        attempts.append(AttemptDetail(**attempt, spans=trace_spans(conn, attempt["trace_id"])))
    return {"rollout_id": base_rollout_id(rollout_id), "attempts": attempts}


def root_traces(conn: sqlite3.Connection, name: str) -> list[dict[str, object]]:
    """Traces whose root span has ``name`` (the job and startup traces), via a partial index."""
    rows = conn.execute(
        """SELECT trace_id, span_id, start_ns, end_ns, run_id,
                  (SELECT COUNT(*) FROM spans c WHERE c.trace_id = s.trace_id) AS span_count
           FROM spans s WHERE parent_span_id IS NULL AND name = ? ORDER BY start_ns""",
        (name,),
    ).fetchall()
    return [
        {
            "trace_id": hex_id(r["trace_id"]),
            "span_id": hex_id(r["span_id"]),
            "duration_ms": max(0, r["end_ns"] - r["start_ns"]) / 1e6,
            "span_count": r["span_count"],
            "run_id": r["run_id"],
        }
        for r in rows
    ]


def self_times(spans: Sequence[SpanRow]) -> dict[str, float]:
    """Milliseconds per span name not covered by a child: where a trace spent its time."""
    children: dict[str | None, list[SpanRow]] = defaultdict(list)
    for span in spans:
        children[span["parent_span_id"]].append(span)
    totals: dict[str, float] = defaultdict(float)
    for span in spans:
        start, end = span["start_ns"], span["end_ns"]
        covered, cursor = 0, start
        for child in sorted(children.get(span["span_id"], []), key=lambda c: c["start_ns"]):
            lo, hi = max(child["start_ns"], cursor), min(child["end_ns"], end)
            if hi > lo:
                covered += hi - lo
                cursor = hi
        totals[span["name"]] += max(0, end - start - covered) / 1e6
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def slowest(conn: sqlite3.Connection, n: int = 10) -> list[SlowDispatch]:
    """The ``n`` longest dispatches, each with its per-span-name self-time breakdown."""
    rows = conn.execute(
        f"{_DISPATCHES_WITH_SPAN_COUNT} ORDER BY d.duration_ns DESC LIMIT ?",
        (int(n),),
    ).fetchall()
    result: list[SlowDispatch] = []
    for row in rows:
        # Per trace: in single-trace mode this covers the whole run, which is what is slow.
        spent = self_times(trace_spans(conn, row["trace_id"]))
        result.append(SlowDispatch(**_dispatch(row), self_time_ms=spent))
    return result


def overview(conn: sqlite3.Connection, bins: int = 20) -> dict[str, object]:
    """Run-level numbers for the viewer: counts, reward per dispatch name, duration histogram."""
    outcomes = {
        (r[0] or "unknown"): r[1]
        for r in conn.execute("SELECT outcome, COUNT(*) FROM dispatches GROUP BY outcome")
    }
    per_name = [
        {"dispatch_name": r[0], "count": r[1], "mean_reward": r[2], "mean_duration_ms": r[3] / 1e6}
        for r in conn.execute(
            "SELECT dispatch_name, COUNT(*), AVG(reward), AVG(duration_ns) FROM dispatches "
            "GROUP BY dispatch_name ORDER BY dispatch_name"
        )
    ]
    low, high = conn.execute("SELECT MIN(duration_ns), MAX(duration_ns) FROM dispatches").fetchone()
    histogram: list[dict[str, float]] = []
    if low is not None:
        width = max(1, (high - low) // bins + 1)
        counts = dict(
            conn.execute(
                "SELECT (duration_ns - ?) / ?, COUNT(*) FROM dispatches GROUP BY 1", (low, width)
            ).fetchall()
        )
        histogram = [
            {
                "from_ms": (low + i * width) / 1e6,
                "to_ms": (low + (i + 1) * width) / 1e6,
                "count": counts.get(i, 0),
            }
            for i in range(bins)
        ]
    spans, traces = conn.execute(
        "SELECT (SELECT COUNT(*) FROM spans), (SELECT COUNT(*) FROM dispatches)"
    ).fetchone()
    return {
        "spans": spans,
        "dispatches": traces,
        "outcomes": outcomes,
        "per_dispatch_name": per_name,
        "duration_histogram": histogram,
        "job_traces": root_traces(conn, names.SPAN_JOB),
        "startup_traces": root_traces(conn, names.SPAN_STARTUP),
        "run_ids": [
            r[0]
            for r in conn.execute("SELECT DISTINCT run_id FROM resources WHERE run_id IS NOT NULL")
        ],
    }


def search(conn: sqlite3.Connection, query: str) -> dict[str, object]:
    """A rollout id (any attempt) or a 32-hex trace id -> where to go."""
    query = query.strip()
    attempts = rollout_attempts(conn, query) if query else []
    if attempts:
        return {"kind": "rollout", "rollout_id": base_rollout_id(query), "attempts": attempts}
    if re.fullmatch(r"[0-9a-fA-F]{32}", query) and trace_exists(conn, query):
        return {"kind": "trace", "trace_id": query.lower()}
    return {"kind": "none", "query": query}


def trace_exists(conn: sqlite3.Connection, trace_id: str) -> bool:
    """Whether the store holds any span of the trace with this hex id (False for non-hex)."""
    try:
        raw = bytes.fromhex(trace_id)
    except ValueError:
        return False
    return (
        conn.execute("SELECT 1 FROM spans WHERE trace_id = ? LIMIT 1", (raw,)).fetchone()
        is not None
    )
