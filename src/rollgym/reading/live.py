"""What the viewer shows of a run still going: its progress, and the rollouts that stalled.

Why from ``progress.json`` and the store, not a new channel from the driver: the driver
already rewrites ``progress.json`` (counts, rate, ETA, the oldest rollouts in flight with their
age) and every finished span of a rollout reaches the store, so the viewer needs nothing else.
A rollout's *stage* is the name of its latest span to finish; it is *stalled* when it has been
in flight at least ``stall_s`` seconds and none of its spans finished in the last ``stall_s``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

#: Seconds without a finished span after which an in-flight rollout counts as stalled.
DEFAULT_STALL_S = 60.0
_PROGRESS = "progress.json"
_SUMMARY = "summary.json"


def read_progress(run_dir: Path) -> dict[str, object] | None:
    """The run's ``progress.json`` with its age (``age_s``), or None when there is none yet
    (or it is being replaced right now: the next poll reads it)."""
    path = run_dir / _PROGRESS
    try:
        data = orjson.loads(path.read_bytes())
        age = time.time() - path.stat().st_mtime
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    data["age_s"] = round(max(0.0, age), 1)
    data["finished"] = _summary_after(run_dir, path)
    return data


def _summary_after(run_dir: Path, progress: Path) -> bool:
    """Whether the run's session ended: its ``summary.json`` (written once the last
    ``progress.json`` is) is not older than ``progress.json``. An interrupted run ends with
    rollouts left of its total, so the counts alone would say it still goes."""
    try:
        return (run_dir / _SUMMARY).stat().st_mtime_ns >= progress.stat().st_mtime_ns
    except OSError:
        return False


def run_going(progress: Mapping[str, object] | None) -> bool:
    """Whether ``progress.json`` says the run is still going (the viewer's rule too: not
    finished, and rollouts left of a known total, or some in flight)."""
    if progress is None or progress.get("finished") is True:
        return False
    total, completed, failed, in_flight = (
        progress.get(key) for key in ("total", "completed", "failed", "in_flight")
    )
    if isinstance(total, int) and total and isinstance(completed, int) and isinstance(failed, int):
        return completed + failed < total
    return isinstance(in_flight, int) and in_flight > 0


def stalled(
    conn: sqlite3.Connection, progress: dict[str, Any], stall_s: float
) -> list[dict[str, object]]:
    """The in-flight rollouts of ``progress`` with no span finished for ``stall_s`` seconds,
    each with its stage (its latest finished span's name, None when none finished yet)."""
    now_ns = time.time_ns()
    rows = []
    for item in progress.get("oldest_in_flight") or []:
        if not isinstance(item, dict) or not isinstance(item.get("rollout_id"), str):
            continue
        last = conn.execute(
            "SELECT name, end_ns FROM spans WHERE rollout_id = ? ORDER BY end_ns DESC LIMIT 1",
            (item["rollout_id"],),
        ).fetchone()
        elapsed = float(item.get("elapsed_s") or 0.0)
        quiet_s = elapsed if last is None else max(0.0, (now_ns - last[1]) / 1e9)
        quiet_s = min(quiet_s, elapsed)
        if elapsed >= stall_s and quiet_s >= stall_s:
            rows.append(
                {
                    **item,
                    "stage": None if last is None else last[0],
                    "quiet_s": round(quiet_s, 1),
                }
            )
    return rows


def reward_histogram(conn: sqlite3.Connection, bins: int = 10) -> list[dict[str, object]]:
    """Dispatches with a reward, in ``bins`` equal bins between the lowest and highest."""
    low, high = conn.execute(
        "SELECT MIN(reward), MAX(reward) FROM dispatches WHERE reward IS NOT NULL"
    ).fetchone()
    if low is None:
        return []
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for (reward,) in conn.execute("SELECT reward FROM dispatches WHERE reward IS NOT NULL"):
        counts[min(bins - 1, int((reward - low) / width))] += 1
    return [
        {"from": low + i * width, "to": low + (i + 1) * width, "count": counts[i]}
        for i in range(bins)
    ]
