"""The viewer's routes that read a run's *files* as well as its trace store.

The store's routes (``reading/viewer_routes.py``) know spans; the run directory knows what was
said (trajectories), why rollouts finally failed (``failures.jsonl``) and how two runs compare.
These routes put both together with the same code the terminal uses: the conversation of
``traces show --conversation``, the comparison of ``rollgym compare``. :func:`viewer` mounts
them with the store's routes and the page; ``rollgym traces serve`` hands it to the store.

* ``/api/runs``: the runs the viewer was given (``--run-dir`` and ``--compare``);
* ``/api/conversation/{id}``: a rollout's conversation, from its trajectory, else from
  messages its spans recorded, else a plain statement that neither was kept;
* ``/api/failures``: failed attempts and finally failed rollouts, grouped by kind;
* ``/api/failed?level=final|attempt``: the rows behind those counts, for the table's filter;
* ``/api/compare``: ``rollgym compare RUN COMPARE_RUN --json``;
* ``/api/find?q=&limit=``: rollouts whose messages, tool calls or errors hold the text
  (:mod:`~rollgym.reading.text_search`: bounded, on the run's files and its store);
* ``/api/groups?offset&limit&zero_variance=1``: the reward spread of each group (a task's
  repeats) with its members, and the share of zero-variance groups (``traces profile``'s);
* ``/api/runs/list``, ``/api/runs/series``: the Runs page, many runs at once
  (:mod:`~rollgym.reading.runs_page`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from aiohttp import web

from rollgym.driver.output import FAILURES, ROLLOUTS, TRAJECTORIES
from rollgym.json_types import JsonObject
from rollgym.reading import failures, queries, runs_page
from rollgym.reading.compare import CompareError, compare_runs
from rollgym.reading.conversation_report import conversation_view, model_latencies
from rollgym.reading.group_view import RunGroups, run_groups, run_repeats
from rollgym.reading.live import read_progress, run_going
from rollgym.reading.profile_cache import ThrottledCache, file_stamps
from rollgym.reading.query_rows import RolloutDetail
from rollgym.reading.run_reader import RolloutFiles, read_lines, read_rollout, recorded_run_id
from rollgym.reading.span_messages import recorded_conversation
from rollgym.reading.text_search import search_run
from rollgym.reading.viewer_routes import DB_KEY, add_api_routes, add_page
from rollgym.tracestore.store import connect_readonly

T = TypeVar("T")

#: The routes, each declared on its handler; :func:`run_routes` mounts them all.
_ROUTES = web.RouteTableDef()


@dataclass(frozen=True)
class RunDirs:
    """The run the viewer serves (A) and the one it compares with it (B), each optional."""

    run_dir: Path | None
    compare_dir: Path | None


RUNS_KEY = web.AppKey("run_views_runs", RunDirs)
#: The last failures report and the file stamps it was read at.
REPORT_KEY = web.AppKey("run_views_failures_report", ThrottledCache)
#: The last read of the run's groups and the file stamps it was read at.
GROUPS_KEY = web.AppKey("run_views_groups", ThrottledCache)

#: How the failures panel names a failure of an unreadable input line (no rollout id, no link).
INPUT_LINE = "input line "

#: What the viewer says when a rollout kept no text anywhere.
NOT_KEPT = (
    "Neither a trajectory nor message text was kept for this rollout: run with "
    "run.trajectories: true (rollgym run CONFIG run.trajectories=true) to keep every message, "
    "tool call and answer in trajectories.jsonl."
)


def run_routes(
    run_dir: Path | None, compare_dir: Path | None, runs: Sequence[Path] = ()
) -> Callable[[web.Application], None]:
    """The routes over the run's files, mounted by :func:`viewer`; ``runs`` (``--runs``) are
    offered on the Runs page with A and B."""

    def mount(app: web.Application) -> None:
        app[RUNS_KEY] = RunDirs(run_dir, compare_dir)
        app[REPORT_KEY] = ThrottledCache()
        app[GROUPS_KEY] = ThrottledCache()
        app.router.add_routes(_ROUTES)
        runs_page.mount(app, runs_page.offered_runs([run_dir, compare_dir, *runs]))

    return mount


def viewer(
    db_path: Path, run_dir: Path | None, compare_dir: Path | None, runs: Sequence[Path] = ()
) -> Callable[[web.Application], None]:
    """The whole viewer, as ``rollgym traces serve`` hands it to the store's app
    (``lifecycle.build_app``'s ``extra_routes``): the page, the store's routes and the routes
    over the run's files."""
    files = run_routes(run_dir, compare_dir, runs)

    def mount(app: web.Application) -> None:
        add_api_routes(app, db_path, run_dir)
        files(app)
        add_page(app)

    return mount


def _dirs(request: web.Request) -> tuple[Path | None, Path | None]:
    dirs = request.app[RUNS_KEY]
    return dirs.run_dir, dirs.compare_dir


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


async def _in_store(request: web.Request, fn: Callable[[sqlite3.Connection], T]) -> T:
    def run() -> T:
        conn = connect_readonly(request.app[DB_KEY])
        try:
            return fn(conn)
        finally:
            conn.close()

    return await asyncio.to_thread(run)


def _run_entry(role: str, path: Path) -> dict[str, object]:
    summary: JsonObject | None = None
    try:
        loaded = orjson.loads((path / "summary.json").read_bytes())
        summary = loaded if isinstance(loaded, dict) else None
    except (OSError, orjson.JSONDecodeError):
        summary = None
    return {
        "role": role,
        "path": str(path),
        "run_id": recorded_run_id(path),
        "exists": path.is_dir(),
        "requested": (summary or {}).get("requested"),
        "completed": (summary or {}).get("completed"),
        "failed": (summary or {}).get("failed"),
        "status": (summary or {}).get("status"),
    }


@_ROUTES.get("/api/runs")
async def _runs(request: web.Request) -> web.Response:
    run_dir, compare_dir = _dirs(request)
    runs = [_run_entry(role, path) for role, path in (("a", run_dir), ("b", compare_dir)) if path]
    return _json({"runs": runs, "can_compare": run_dir is not None and compare_dir is not None})


def _attempt_errors(detail: RolloutDetail) -> list[dict[str, object]]:
    errors: list[dict[str, object]] = []
    for attempt in detail["attempts"]:
        if attempt["outcome"] in failures.FAILED_OUTCOMES:
            found = failures.attempt_error(attempt, attempt["spans"])
            errors.append(
                {"rollout_id": attempt["rollout_id"], "attempt": attempt["attempt"], **found}
            )
    return errors


@_ROUTES.get("/api/conversation/{rollout_id}")
async def _conversation(request: web.Request) -> web.Response:
    rollout_id = request.match_info["rollout_id"]
    run_dir, _ = _dirs(request)
    files = (
        await asyncio.to_thread(read_rollout, run_dir, rollout_id) if run_dir else RolloutFiles()
    )
    detail = await _in_store(request, lambda conn: queries.rollout_detail(conn, rollout_id))
    spans = [span for attempt in detail["attempts"] for span in attempt["spans"]]
    view = conversation_view(rollout_id, files, model_latencies(spans))
    view["source"] = "trajectory" if view["has_trajectory"] else None  # a failure's partial too
    view["attempt_errors"] = _attempt_errors(detail)
    if not view["has_trajectory"]:
        last = detail["attempts"][-1] if detail["attempts"] else None
        recorded = recorded_conversation(last["spans"]) if last else []
        view["conversation"] = recorded
        view["source"] = "trace" if recorded else None
        if last and files.rollout is None and files.failure is None:
            view["rollout_id"] = last["rollout_id"]
            view["dispatch_name"] = last["dispatch_name"]
            view["reward"] = last["reward"]
            view["outcome"] = "ok" if last["outcome"] == "ok" else "failed"
    if view["outcome"] == "failed" and not view.get("error_kind") and view["attempt_errors"]:
        view["error_kind"] = view["attempt_errors"][-1]["error_kind"]
        view["message"] = view["attempt_errors"][-1]["message"]
    view["hint"] = None if view["source"] else _no_text_hint(run_dir, view["outcome"])
    found = files.rollout is not None or files.failure is not None or detail["attempts"]
    return _json(view, 200 if found else 404)


def _no_text_hint(run_dir: Path | None, outcome: object) -> str:
    kept = run_dir is not None and (run_dir / TRAJECTORIES).exists()
    if kept and outcome == "failed":
        return (
            "This rollout failed before its agent returned a trajectory (the run keeps them "
            "for rollouts that answer), and its spans recorded no message text."
        )
    return NOT_KEPT


def _final_records(run_dir: Path | None) -> dict[str, dict[str, Any]]:
    if run_dir is None:
        return {}
    return {_failure_name(r): r for r in read_lines(run_dir / FAILURES)}


def _failure_name(record: Mapping[str, object]) -> str:
    """A final failure's rollout id, or for an input line that could not be read (it has
    none) ``input line N``."""
    rollout_id = record.get("rollout_id")
    return rollout_id if isinstance(rollout_id, str) else f"{INPUT_LINE}{record.get('line')}"


def _report(conn: sqlite3.Connection, run_dir: Path | None) -> dict[str, Any]:
    rows, total = failures.failed_attempts(conn)
    records = _final_records(run_dir)
    for row in rows:  # a final failure's kind is the driver's, as failures.jsonl has it
        record = records.get(row["rollout_id"] or "")
        if row["final"] and record:
            row["error_kind"] = record.get("error_kind") or row["error_kind"]
            row["message"] = record.get("message") or row["message"]
    final = [row for row in rows if row["final"]]
    final_groups_from: Sequence[Mapping[str, object]]
    if records:  # failures.jsonl also names failures the store never saw (a bad input line)
        in_store = {row["rollout_id"] for row in final}
        final_groups_from = final + [
            {"rollout_id": rid, "error_kind": r.get("error_kind"), "message": r.get("message")}
            for rid, r in records.items()
            if rid not in in_store
        ]
    else:
        final_groups_from = final
    bases = {queries.base_rollout_id(row["rollout_id"] or "") for row in rows}
    final_bases = {queries.base_rollout_id(row["rollout_id"] or "") for row in final}
    return {
        "attempts": {
            "failed": total,
            "shown": len(rows),
            "rollouts": len(bases),
            "recovered": len(bases - final_bases),
            "groups": failures.groups(rows),
        },
        "rollouts": {
            "failed": len(final_groups_from),
            "source": "failures.jsonl" if records else "trace store",
            "groups": failures.groups(final_groups_from),
        },
        "rows": rows,
    }


async def _cached_report(request: web.Request) -> dict[str, Any]:
    """The report, read again only when the store or ``failures.jsonl`` changed (paging
    through the failed rows must not read every failed trace for each page), and while the
    run goes at most at the rate :class:`ThrottledCache` allows."""
    run_dir, _ = _dirs(request)
    db = request.app[DB_KEY]
    paths = [db, db.with_name(db.name + "-wal")]
    if run_dir is not None:
        paths.append(run_dir / FAILURES)
    stamp = file_stamps(paths)
    cache: ThrottledCache[dict[str, Any]] = request.app[REPORT_KEY]
    # While the run goes the store changes every export: read it again at a bounded rate.
    going = run_going(read_progress(run_dir)) if run_dir is not None else False

    async def compute() -> dict[str, Any]:
        report: dict[str, Any] = await _in_store(request, lambda conn: _report(conn, run_dir))
        return report

    return await cache.get(stamp, going, compute)


@_ROUTES.get("/api/failures")
async def _failures(request: web.Request) -> web.Response:
    report = await _cached_report(request)
    return _json({key: value for key, value in report.items() if key != "rows"})


_SORT_KEYS = {
    "start": "start_ns",
    "duration": "duration_ms",
    "rollout_id": "rollout_id",
    "outcome": "outcome",
    "dispatch_name": "dispatch_name",
    "reward": "start_ns",  # a failed attempt has no reward
}


def _kept(row: dict[str, Any], query: Mapping[str, str]) -> bool:
    """The table's other filters, on a failed row (a reward filter keeps none: no reward)."""
    for key in ("outcome", "dispatch_name"):
        if query.get(key) and row[key] != query[key]:
            return False
    if query.get("min_reward") or query.get("max_reward"):
        return False
    try:
        low = float(query.get("min_duration_ms") or "-inf")
        high = float(query.get("max_duration_ms") or "inf")
    except ValueError:
        return True
    return bool(low <= row["duration_ms"] <= high)


@_ROUTES.get("/api/failed")
async def _failed(request: web.Request) -> web.Response:
    """A page of the failed rows: ``level=attempt`` every failed attempt, ``level=final`` the
    last attempts of rollouts that finally failed (optionally of one ``dispatch_name``)."""
    level = request.query.get("level", "final")
    if level not in ("final", "attempt"):
        return _json({"error": "level must be final or attempt"}, 400)
    try:
        offset = max(0, int(request.query.get("offset", "0")))
        limit = max(1, min(500, int(request.query.get("limit", "50"))))
    except ValueError:
        return _json({"error": "offset and limit must be integers"}, 400)
    report = await _cached_report(request)
    rows = [r for r in report["rows"] if level == "attempt" or r["final"]]
    rows = [r for r in rows if _kept(r, request.query)]
    sort = request.query.get("sort", "start")
    key = _SORT_KEYS.get(sort, "start_ns")
    rows.sort(key=lambda r: (r[key] is None, r[key]), reverse=request.query.get("desc") == "1")
    return _json(
        {
            "level": level,
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "rows": rows[offset : offset + limit],
        }
    )


@_ROUTES.get("/api/compare")
async def _compare(request: web.Request) -> web.Response:
    run_dir, compare_dir = _dirs(request)
    if run_dir is None or compare_dir is None:
        return _json(
            {
                "error": "serve two runs to compare them: rollgym traces serve --run-dir A --compare B"
            },
            404,
        )
    try:
        result = await asyncio.to_thread(compare_runs, run_dir, compare_dir)
    except CompareError as exc:
        return _json({"error": str(exc)}, 400)
    return _json(result)


@_ROUTES.get("/api/groups")
async def _groups(request: web.Request) -> web.Response:
    """A page of the run's groups (``zero_variance=1``: only those), read again only when
    ``rollouts.jsonl`` or ``failures.jsonl`` changed."""
    run_dir, _ = _dirs(request)
    if run_dir is None:
        return _json(
            {"error": "serve a run to see its groups: rollgym traces serve --run-dir RUN"}, 404
        )
    try:
        offset = max(0, int(request.query.get("offset", "0")))
        limit = max(1, min(500, int(request.query.get("limit", "50"))))
    except ValueError:
        return _json({"error": "offset and limit must be integers"}, 400)
    stamp = file_stamps([run_dir / ROLLOUTS, run_dir / FAILURES])
    going = run_going(read_progress(run_dir))
    cache: ThrottledCache[RunGroups] = request.app[GROUPS_KEY]

    async def compute() -> RunGroups:
        return await asyncio.to_thread(run_groups, run_dir, run_repeats(run_dir))

    groups = await cache.get(stamp, going, compute)
    zero_only = request.query.get("zero_variance") in ("1", "true")
    return _json(groups.page(offset, limit, zero_only))


@_ROUTES.get("/api/find")
async def _find(request: web.Request) -> web.Response:
    """Text search over messages, tool calls and errors (the search box, when no id matched)."""
    run_dir, _ = _dirs(request)
    try:
        limit = max(1, min(200, int(request.query.get("limit", "50"))))
    except ValueError:
        return _json({"error": "limit must be an integer"}, 400)
    query = request.query.get("q", "")
    found = await _in_store(request, lambda conn: search_run(run_dir, conn, query, limit))
    return _json(found)
