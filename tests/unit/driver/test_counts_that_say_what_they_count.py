"""Counts that say what they count: an interruption's cancelled rollouts are not failures, and
an input line that could not be read is one record of the total, not ``repeats``."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from rollgym.driver.progress import ProgressReporter
from rollgym.driver.retry import InFlight
from rollgym.driver.summary import Aggregator, Summary
from rollgym.reading.report import print_report, summary_table


def _interrupted() -> Summary:
    aggregator = Aggregator(repeats=2, pass_threshold=1.0)
    aggregator.add_result("solver", 0, 1.0)
    aggregator.add_result("solver", 0, 0.0)
    aggregator.add_result("solver", 1, 1.0)
    aggregator.add_failure("solver", "http_5xx")
    for _ in range(3):  # in flight when Ctrl-C came
        aggregator.add_failure("solver", "cancelled")
    return Summary.from_aggregator("r", "interrupted", aggregator, 1.0, 7)


def test_the_end_table_shows_cancelled_apart_from_failed() -> None:
    summary = _interrupted()
    table = summary_table(summary)
    headers = [column.header for column in table.columns]
    assert headers[:5] == ["dispatch name", "completed", "failed", "cancelled", "mean reward"]
    row = [next(iter(column.cells)) for column in table.columns]
    assert row[1:4] == ["3", "1", "3"]  # 1 failed, 3 cancelled
    # pass@k never counts the cancelled: task 0 has 2 rewards (one passed), task 1 one
    assert summary.by_dispatch_name["solver"]["pass_at_k"] == {"1": 0.75, "2": 1.0}
    console = Console(file=io.StringIO(), width=200)
    print_report(summary, console)
    assert isinstance(console.file, io.StringIO)
    assert "requested 7 = completed 3 + failed 1 + cancelled 3" in console.file.getvalue()


def test_a_run_without_cancellations_keeps_its_table() -> None:
    aggregator = Aggregator(repeats=1, pass_threshold=1.0)
    aggregator.add_failure("solver", "http_5xx")
    summary = Summary.from_aggregator("r", "completed", aggregator, 1.0, 1)
    assert "cancelled" not in [column.header for column in summary_table(summary).columns]
    assert "cancelled" not in summary.to_json()["by_dispatch_name"]["solver"]


def test_an_unreadable_line_is_one_record_of_the_total(tmp_path: Path) -> None:
    aggregator = Aggregator(repeats=4, pass_threshold=1.0)
    reporter = ProgressReporter(
        aggregator, InFlight(), total=3 * 4, path=None, interval_s=60.0, stream=io.StringIO()
    )
    for _ in range(4):  # two readable lines, four repeats each
        aggregator.add_result("solver", 0, 1.0)
        aggregator.add_result("solver", 2, 1.0)
    aggregator.add_failure(None, "invalid_row", whole_line=True)  # line 2: not JSON
    snap = reporter.tick()
    assert snap["total"] == 9 and snap["completed"] + snap["failed"] == 9
    assert reporter.line(snap).startswith("[rollgym] 9/9 done")
    resumed = Aggregator(repeats=4, pass_threshold=1.0)  # a resume reads failures.jsonl
    resumed.add_record(
        {"task_index": 1, "rollout_index": None, "error_kind": "invalid_row"}, is_result=False
    )
    assert resumed.expected_total(12) == 9
