"""progress.json has exactly the keys of its TypedDict, and the plain line reads them."""

from __future__ import annotations

import io
from pathlib import Path

import orjson

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
