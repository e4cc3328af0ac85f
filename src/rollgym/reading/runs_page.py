"""The viewer's Runs page routes: many runs at once, from their files.

``rollgym traces serve --run-dir A --compare B --runs runs/`` names the runs a person may pick
on the page (``--runs`` takes run folders, or a folder holding run folders, one or two levels
down); the browser picks
among them by index, never by path, so the viewer reads no folder it was not given. The
figures are :mod:`rollgym.reading.run_series`'s, the code of ``rollgym compare RUN...``:

* ``/api/runs/list``: every run offered (index, folder, run id, ``run.step``, counts);
* ``/api/runs/series?runs=0,2,3``: the picked runs' config differences, each run's figures
  with staleness and its difference from the first picked, and mean reward and pass@k over
  policy version and over step (``rollgym compare RUN... [--over version|step] --json``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import orjson
from aiohttp import web

from rollgym.driver.output import FAILURES, ROLLOUTS
from rollgym.reading.compare import BootstrapSettings, CompareError
from rollgym.reading.config_diff import read_config
from rollgym.reading.run_reader import recorded_run_id
from rollgym.reading.run_series import compare_facts, read_runs, series_of

#: The run folders the page may pick from, in the order they were given.
OFFERED_KEY = web.AppKey("runs_page_offered", tuple)

#: The most runs one request may pick (each is read in full).
MAX_PICKED = 50

_ROUTES = web.RouteTableDef()


def is_run(folder: Path) -> bool:
    """A run's output folder: it holds rollouts or failures."""
    return (folder / ROLLOUTS).exists() or (folder / FAILURES).exists()


def _runs_inside(folder: Path, depth: int = 2) -> list[Path]:
    """The run folders under ``folder``, at most ``depth`` levels down, by path."""
    found: list[Path] = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if is_run(child):
            found.append(child)
        elif depth > 1:
            found.extend(_runs_inside(child, depth - 1))
    return found


def offered_runs(named: Sequence[Path | None]) -> tuple[Path, ...]:
    """The runs named, each once; a folder that is no run stands for the run folders in it
    (or in its sub-folders), by path."""
    found: list[Path] = []
    seen: set[Path] = set()
    for path in named:
        if path is None or not path.is_dir():
            continue
        for run in [path] if is_run(path) else _runs_inside(path):
            if run.resolve() not in seen:
                seen.add(run.resolve())
                found.append(run)
    return tuple(found)


def mount(app: web.Application, runs: tuple[Path, ...]) -> None:
    """Offer ``runs`` on the Runs page (``run_views.run_routes`` calls this)."""
    app[OFFERED_KEY] = runs
    app.router.add_routes(_ROUTES)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


def _summary(folder: Path) -> dict[str, object]:
    try:
        loaded = orjson.loads((folder / "summary.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _listing(runs: tuple[Path, ...]) -> list[dict[str, object]]:
    rows = []
    for index, folder in enumerate(runs):
        summary, run = _summary(folder), read_config(folder).get("run")
        rows.append(
            {
                "index": index,
                "path": str(folder),
                "run_id": recorded_run_id(folder),
                "step": run.get("step") if isinstance(run, dict) else None,
                "status": summary.get("status"),
                "requested": summary.get("requested"),
                "completed": summary.get("completed"),
                "failed": summary.get("failed"),
            }
        )
    return rows


@_ROUTES.get("/api/runs/list")
async def _list(request: web.Request) -> web.Response:
    runs: tuple[Path, ...] = request.app[OFFERED_KEY]
    return _json({"runs": await asyncio.to_thread(_listing, runs)})


def _picked(query: str, offered: int) -> list[int]:
    """``0,2,3`` as indices of offered runs; a ValueError names what is wrong."""
    try:
        picked = [int(part) for part in query.split(",") if part.strip()]
    except ValueError:
        raise ValueError(
            f"runs must be indices of offered runs (runs=0,1,...), got {query!r}"
        ) from None
    if not picked:
        raise ValueError("pick at least one run: runs=0,1,...")
    if len(picked) > MAX_PICKED:
        raise ValueError(f"at most {MAX_PICKED} runs at once, got {len(picked)}")
    for index in picked:
        if not 0 <= index < offered:
            raise ValueError(f"no run {index}: {offered} runs are offered (0 to {offered - 1})")
    if len(set(picked)) != len(picked):
        raise ValueError("a run is picked twice")
    return picked


def _series(folders: list[Path]) -> dict[str, object]:
    runs = read_runs(folders)
    return {
        **compare_facts(runs, BootstrapSettings()),
        "version": series_of(runs, "version"),
        "step": series_of(runs, "step"),
    }


@_ROUTES.get("/api/runs/series")
async def _series_route(request: web.Request) -> web.Response:
    runs: tuple[Path, ...] = request.app[OFFERED_KEY]
    try:
        picked = _picked(request.query.get("runs", ""), len(runs))
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    try:
        result = await asyncio.to_thread(_series, [runs[i] for i in picked])
    except CompareError as exc:
        return _json({"error": str(exc)}, 400)
    result["picked"] = picked
    return _json(result)
