"""``rollgym traces ls|show|slowest|profile`` on a small store built here: what each prints,
in JSON and for a person, and the exit status a missing rollout gets.

The store is a real trace store process fed a synthetic run through the OpenTelemetry SDK
(8 task rows; row 4 is retried once, row 6 fails for good), so every command reads what a
run would have written.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from rollgym.cli.main import main
from rollgym.tracestore.store_process import start_trace_store
from synthetic_run import emit_run

ROWS = 8
DISPATCHES = ROWS + 1  # row 4's first attempt failed and was tried again


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    store = start_trace_store(folder / "traces.db", folder / "store.log")
    try:
        emit_run(lambda: OTLPSpanExporter(endpoint=store.traces_endpoint), rollouts=ROWS)
    finally:
        assert store.stop() == 0
    return folder


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(["traces", *argv, "--json"]) == 0, capsys.readouterr().err
    return orjson.loads(capsys.readouterr().out)


def _text(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    assert main(["traces", *argv]) == status
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out


def test_ls_pages_filters_and_sorts(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = _json(capsys, "ls", str(run_dir), "--limit", "3", "--offset", "2")
    assert isinstance(page, dict)
    assert (page["total"], page["limit"], page["offset"]) == (DISPATCHES, 3, 2)
    assert [row["rollout_id"] for row in page["rows"]] == ["2-0", "3-0", "4-0"]
    failed = _json(capsys, "ls", str(run_dir), "--outcome", "error")
    assert isinstance(failed, dict)
    assert {row["rollout_id"] for row in failed["rows"]} == {"4-0", "6-0"}
    longest = _json(capsys, "ls", str(run_dir), "--sort", "duration", "--desc")
    assert isinstance(longest, dict)
    durations = [row["duration_ms"] for row in longest["rows"]]
    assert durations == sorted(durations, reverse=True) and len(durations) == DISPATCHES
    table = _text(capsys, "ls", str(run_dir))
    for row in page["rows"]:
        assert row["rollout_id"] in table and row["trace_id"] in table


def test_show_lists_every_attempt_as_a_tree(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    detail = _json(capsys, "show", str(run_dir), "4-0")
    assert isinstance(detail, dict)
    attempts = detail["attempts"]
    assert [attempt["attempt"] for attempt in attempts] == [0, 1]
    assert [attempt["outcome"] for attempt in attempts] == ["error", "ok"]
    for attempt in attempts:
        spans = attempt["spans"]
        roots = [span for span in spans if span["parent_span_id"] is None]
        assert [root["name"] for root in roots] == ["gym.rollout.dispatch"]
        assert len(spans) == attempt["span_count"]
    tree = _text(capsys, "show", str(run_dir), "4-0")
    assert "gym.rollout.dispatch" in tree and "gym.rollout" in tree


def test_show_of_an_unknown_rollout_exits_1(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["traces", "show", str(run_dir), "99-0", "--json"]) == 1
    assert orjson.loads(capsys.readouterr().out)["attempts"] == []


def test_slowest_is_the_long_tail_with_its_self_time(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = _json(capsys, "slowest", str(run_dir), "-n", "3")
    assert isinstance(items, list) and len(items) == 3
    durations = [item["duration_ms"] for item in items]
    assert durations == sorted(durations, reverse=True)
    page = _json(capsys, "ls", str(run_dir), "--sort", "duration", "--desc", "--limit", "1")
    assert isinstance(page, dict)
    assert items[0]["rollout_id"] == page["rows"][0]["rollout_id"]
    for item in items:
        assert sum(item["self_time_ms"].values()) == pytest.approx(item["duration_ms"], rel=0.05)
    assert items[0]["rollout_id"] in _text(capsys, "slowest", str(run_dir), "-n", "3")


def test_profile_splits_the_time_into_phases(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _json(capsys, "profile", str(run_dir), "-n", "2", "--bins", "4")
    assert isinstance(report, dict)
    assert report["dispatches"] == DISPATCHES
    shares = {phase["name"]: phase["share"] for phase in report["phases"]}
    assert {"http", "agent", "engine_prefill"} <= shares.keys()
    assert all(0.0 <= share <= 1.0 for share in shares.values())
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    text = _text(capsys, "profile", str(run_dir), "-n", "2", "--bins", "4")
    assert "engine_prefill" in text


def test_a_bad_choice_is_one_line_naming_the_option(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["traces", "ls", str(run_dir), "--sort", "speed"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rollgym traces ls: error: argument --sort: invalid choice: 'speed'")
    assert "Traceback" not in "\n".join(err)
