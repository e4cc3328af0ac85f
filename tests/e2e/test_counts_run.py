"""Counts that say what they count, on real runs: a malformed input line is one record of the
total (the console ends at N/N, progress.json's total is reached, the live views stop), and
Ctrl-C's cancelled rollouts are a column of their own in the end table, not failures."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest
from e2e_support import Job, agent, killed_if_left_running
from grpo_run import GOOD_LINES, REPEATS, bad_line_run

from rollgym.reading.live import read_progress, run_going

pytestmark = pytest.mark.e2e


def test_a_bad_line_counts_once_and_the_run_ends_at_its_total(
    tmp_path: Path,
) -> None:
    out, printed = bad_line_run(tmp_path)
    total = GOOD_LINES * REPEATS + 1
    progress = [line for line in printed.splitlines() if line.startswith("[rollgym] ")]
    assert progress and progress[-1].startswith(f"[rollgym] {total}/{total} done"), progress
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["requested"] == total and summary["failed_by_kind"] == {"invalid_row": 1}
    live = read_progress(out)
    assert live is not None and live["total"] == total and live["finished"] is True
    assert not run_going(live)


def test_ctrl_c_cancelled_are_not_failed(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write({"a": agent(delay_s=0.2)}, [{"q": i} for i in range(400)], agent="a", concurrency=16)
    proc = job.start()
    with killed_if_left_running(proc):
        job.wait_rollouts(20)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    summary = job.summary
    cancelled = summary["failed_by_kind"]["cancelled"]
    assert cancelled >= 1 and summary["by_dispatch_name"]["a"]["cancelled"] == cancelled
    table = output[output.index("┏") :]
    header = next(line for line in table.splitlines() if "dispatch name" in line)
    cells = [c.strip() for c in header.split("┃")[1:-1]]
    assert cells[:4] == ["dispatch name", "completed", "failed", "cancelled"]
    row = next(line for line in table.splitlines() if line.startswith("│ a "))
    values = [c.strip() for c in row.split("│")[1:-1]]
    assert values[2:4] == ["0", str(cancelled)]
    assert f"failed 0 + cancelled {cancelled}" in output
    # the interrupted run's live views stop: its session ended short of the total
    live = read_progress(job.out)
    assert live is not None and live["finished"] is True and not run_going(live)
