"""progress.json has exactly the keys of its TypedDict, and the plain line reads them."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson

from rollgym.driver.dispatch_window import DispatchWindows
from rollgym.driver.progress import ProgressReporter, ProgressSnapshot
from rollgym.driver.retry import InFlight
from rollgym.driver.summary import Aggregator


def test_the_snapshot_written_is_the_typed_shape_and_the_line_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    reporter = ProgressReporter(
        Aggregator(repeats=1, pass_threshold=1.0),
        InFlight(),
        total=8,
        path=path,
        interval_s=60.0,
        stream=io.StringIO(),
    )
    snap = reporter.tick()
    assert set(snap) == set(ProgressSnapshot.__annotations__)
    assert orjson.loads(path.read_bytes()) == snap
    assert snap["total"] == 8 and snap["completed"] == 0 and snap["failed_by_kind"] == {}
    line = reporter.line(snap)
    assert line.startswith("[rollgym] 0/8 done (0 completed, 0 failed)") and "0 in flight" in line


async def test_attempts_waiting_for_a_dispatch_window_are_in_the_snapshot_and_the_line(
    tmp_path: Path,
) -> None:
    windows = DispatchWindows(ceiling=32, timeout_s=10.0)
    window = windows.of("solver")
    for _ in range(int(window.window)):
        await window.acquire()
    waiters = [asyncio.ensure_future(window.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    reporter = ProgressReporter(
        Aggregator(repeats=1, pass_threshold=1.0),
        InFlight(),
        total=40,
        path=tmp_path / "progress.json",
        interval_s=60.0,
        stream=io.StringIO(),
        windows=lambda: windows,
    )
    snap = reporter.tick()
    assert snap["dispatch_windows"] == {"solver": {"window": 32, "sent": 32, "waiting": 3}}
    assert "0 in flight (3 waiting for a dispatch window)," in reporter.line(snap)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert reporter.tick()["dispatch_windows"]["solver"]["waiting"] == 0
