"""The viewer's JSON routes, on the same aiohttp app as the OTLP receiver.

Why here and not in a separate server: one process, one port per run; the viewer reads the store
through the same query functions as the CLI, on short-lived read-only connections in a worker
thread so a slow query never stalls OTLP ingest on the event loop.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from rollgym.reading import live, queries
from rollgym.reading.profile import profile_store
from rollgym.reading.profile_cache import ThrottledCache, store_stamp
from rollgym.tracestore.serve_command import LINE_PREFIX
from rollgym.tracestore.store import connect_readonly

DB_KEY = web.AppKey("db_path", Path)
RUN_DIR_KEY = web.AppKey("run_dir", object)
PROFILE_KEY = web.AppKey("profile_cache", ThrottledCache)


def viewer_dir() -> Path:
    """Where the static viewer files live (packaged with the module)."""
    return Path(__file__).with_name("viewer")


def add_page(app: web.Application) -> None:
    """Mount the viewer's page: ``/`` and its static files under ``/static/``."""
    static = viewer_dir()

    async def index(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(static / "index.html")

    app.router.add_get("/", index)
    app.router.add_static("/static/", static)


@web.middleware
async def one_line_failures(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A viewer request that fails on something the run's files hold (a folder where a record
    file should be, a file that cannot be read) answers 500 with the reason as JSON, which
    the page shows, and the store's log gets one line naming it, not a traceback. The OTLP
    routes keep their own answers (:mod:`rollgym.tracestore.receiver`)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for a person, whatever went wrong
        if not request.path.startswith("/api/"):
            raise
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            reason = f"{exc.filename}: {exc.strerror}"  # which file, and what is wrong with it
        else:
            reason = f"{type(exc).__name__}: {exc}"
        print(f"{LINE_PREFIX}{request.method} {request.path}: {reason}", file=sys.stderr)
        return _json({"error": reason}, 500)


def add_api_routes(app: web.Application, db_path: Path, run_dir: Path | None) -> None:
    """Mount ``/api/*``; ``run_dir`` (optional) adds the run's summary.json to the overview."""
    app.middlewares.append(one_line_failures)
    app[DB_KEY] = db_path
    app[RUN_DIR_KEY] = run_dir
    app[PROFILE_KEY] = ThrottledCache()
    app.router.add_get("/api/overview", _overview)
    app.router.add_get("/api/rollouts", _rollouts)
    app.router.add_get("/api/rollout/{rollout_id}", _rollout)
    app.router.add_get("/api/trace/{trace_id}", _trace)
    app.router.add_get("/api/search", _search)
    app.router.add_get("/api/profile", _profile)
    app.router.add_get("/api/progress", _progress)


async def _query(
    request: web.Request, fn: Callable[..., object], *args: object, **kwargs: object
) -> Any:
    def run() -> Any:
        conn = connect_readonly(request.app[DB_KEY])
        try:
            return fn(conn, *args, **kwargs)
        finally:
            conn.close()

    return await asyncio.to_thread(run)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


async def _overview(request: web.Request) -> web.Response:
    data = await _query(request, queries.overview)
    run_dir = request.app[RUN_DIR_KEY]
    data["summary"] = None
    if isinstance(run_dir, Path) and (run_dir / "summary.json").exists():
        try:
            data["summary"] = orjson.loads((run_dir / "summary.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            data["summary"] = None
    return _json(data)


def _number(request: web.Request, key: str) -> float | None:
    value = request.query.get(key, "")
    if value == "":
        return None
    try:
        return float(value)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"{key} must be a number") from exc


async def _rollouts(request: web.Request) -> web.Response:
    q = request.query
    try:
        data = await _query(
            request,
            queries.list_rollouts,
            limit=max(1, min(500, int(q.get("limit", "50")))),
            offset=max(0, int(q.get("offset", "0"))),
            outcome=q.get("outcome") or None,
            dispatch_name=q.get("dispatch_name") or None,
            min_reward=_number(request, "min_reward"),
            max_reward=_number(request, "max_reward"),
            min_duration_ms=_number(request, "min_duration_ms"),
            max_duration_ms=_number(request, "max_duration_ms"),
            sort=q.get("sort", "start"),
            descending=q.get("desc", "0") in ("1", "true"),
        )
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    return _json(data)


async def _rollout(request: web.Request) -> web.Response:
    data = await _query(request, queries.rollout_detail, request.match_info["rollout_id"])
    return _json(data, 200 if data["attempts"] else 404)


async def _trace(request: web.Request) -> web.Response:
    try:
        spans = await _query(request, queries.trace_spans, request.match_info["trace_id"])
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    return _json(
        {"trace_id": request.match_info["trace_id"], "spans": spans}, 200 if spans else 404
    )


async def _search(request: web.Request) -> web.Response:
    return _json(await _query(request, queries.search, request.query.get("q", "")))


async def _profile(request: web.Request) -> web.Response:
    """The ``traces profile`` report, plus the reward and duration histograms it plots;
    computed once per change of the store, and at a bounded rate while the run goes
    (:mod:`~rollgym.reading.profile_cache`)."""
    db = request.app[DB_KEY]

    async def compute() -> dict[str, Any]:
        data = await asyncio.to_thread(profile_store, db, stragglers=10, bins=40)
        data["reward_histogram"] = await _query(request, live.reward_histogram)
        overview = await _query(request, queries.overview)
        data["duration_histogram"] = overview["duration_histogram"]
        return data

    run_dir = request.app[RUN_DIR_KEY]
    progress = live.read_progress(run_dir) if isinstance(run_dir, Path) else None
    cache: ThrottledCache[dict[str, Any]] = request.app[PROFILE_KEY]
    return _json(await cache.get(store_stamp(db), live.run_going(progress), compute))


async def _progress(request: web.Request) -> web.Response:
    """The run's ``progress.json`` (null without ``--run-dir`` or before the run wrote one),
    with the in-flight rollouts that made no progress for ``stall_s`` seconds (default 60)."""
    try:
        stall_s = float(request.query.get("stall_s", str(live.DEFAULT_STALL_S)))
    except ValueError:
        return _json({"error": "stall_s must be a number"}, 400)
    run_dir = request.app[RUN_DIR_KEY]
    progress = live.read_progress(run_dir) if isinstance(run_dir, Path) else None
    if progress is None:
        return _json({"progress": None, "stalled": [], "stall_s": stall_s})
    stalled = await _query(request, live.stalled, progress, stall_s)
    return _json({"progress": progress, "stalled": stalled, "stall_s": stall_s})
