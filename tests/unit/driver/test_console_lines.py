"""The console's words: failures as they happen, resume counts, empty and all-failed runs."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from rollgym.driver.progress import FailureEcho, resume_line
from rollgym.driver.summary import Aggregator, Summary
from rollgym.reading.report import _rate, nothing_completed_line, nothing_left_line, print_report


def _summary(completed: int, failed: int, status: str = "completed") -> Summary:
    agg = Aggregator(1, 1.0)
    for index in range(completed):
        agg.add_result("a", index, 1.0)
    for _ in range(failed):
        agg.add_failure("a", "unknown_agent")
    summary = Summary.from_aggregator("r", status, agg, 1.0, completed + failed)
    summary.output_dir = "runs/r"
    return summary


def test_the_first_failure_of_each_kind_is_said_then_only_counted() -> None:
    out = io.StringIO()
    echo = FailureEcho(out)
    echo.failed("unknown_agent", "0-0", "rows.jsonl:1: field 'agent': no agent 'ghost'")
    echo.failed("unknown_agent", "1-0", "rows.jsonl:2: field 'agent': no agent 'ghost'")
    echo.failed("cancelled", "2-0", "interrupted")
    echo.failed("http_5xx", "3-0", "HTTP 500: boom\nmore")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("rollgym: failure (unknown_agent) 0-0: rows.jsonl:1: field 'agent'")
    assert lines[1].startswith("rollgym: failure (http_5xx) 3-0: HTTP 500: boom (first")


def test_a_resume_says_what_is_done_and_what_will_run() -> None:
    agg = Aggregator(1, 1.0)
    for index in range(3):
        agg.add_result("a", index, 1.0)
    agg.add_failure("a", "http_4xx")
    line = resume_line(Path("runs/x"), agg, 10)
    assert line == (
        "rollgym: resuming runs/x: 4 of 10 rollouts already recorded "
        "(3 completed, 1 failed), 6 to run"
    )


def test_an_empty_input_is_not_called_an_earlier_sessions_work() -> None:
    empty = _summary(0, 0)
    empty.rollouts_per_s = None
    assert _rate(empty) == "nothing ran: the input has no rows"
    resumed = _summary(2, 0)
    resumed.rollouts_per_s = None
    assert "earlier session" in _rate(resumed)


def test_a_run_that_completed_nothing_warns() -> None:
    line = nothing_completed_line(_summary(0, 3))
    assert line is not None and "no rollout completed; all 3 failed (unknown_agent: 3)" in line
    assert "runs/r/failures.jsonl" in line
    assert nothing_completed_line(_summary(1, 3)) is None
    assert nothing_completed_line(_summary(0, 0)) is None
    assert nothing_completed_line(_summary(0, 3, "interrupted")) is None


def test_a_rerun_with_nothing_left_but_failures_names_retry_failed() -> None:
    rerun = _summary(2, 3)
    rerun.rollouts_per_s = None
    line = nothing_left_line(rerun)
    assert line is not None and "3 of them as failed" in line and "run.retry_failed=true" in line
    assert "run.retry_failed=true" in _rate(rerun)
    clean = _summary(2, 0)
    clean.rollouts_per_s = None
    assert nothing_left_line(clean) is None
    assert nothing_left_line(_summary(2, 3)) is None  # this session ran something


HOSTILE = "x\x1b[2J\x1b]0;pwned\x07\nrollgym: all good, 0 failed [bold]\u202e"


def test_the_first_failure_line_prints_id_and_message_escaped() -> None:
    out = io.StringIO()
    FailureEcho(out).failed("http_5xx", HOSTILE, HOSTILE)
    text = out.getvalue()
    assert text.count("\n") == 1 and "\x1b" not in text and "\u202e" not in text
    assert text.startswith("rollgym: failure (http_5xx) x\\x1b[2J\\x1b]0;pwned\\x07\\n")


def test_the_end_of_run_report_prints_config_and_server_text_escaped() -> None:
    summary = _summary(1, 1)
    summary.by_dispatch_name = {HOSTILE: summary.by_dispatch_name["a"]}
    summary.warnings = [HOSTILE]
    summary.output_dir = HOSTILE
    summary.run_id = HOSTILE
    out = io.StringIO()
    print_report(summary, Console(file=out, width=400, force_terminal=False))
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert not any(line.startswith("rollgym: all good") for line in text.splitlines())
    assert "[bold]" in text  # shown, not read as markup
