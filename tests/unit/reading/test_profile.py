"""``traces profile`` over a real store holding a synthetic run (exported by the OTel SDK)."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import orjson
import pytest

from rollgym.cli import traces as traces_cli
from rollgym.reading.profile_phases import PHASES
from rollgym.telemetry import names
from synthetic_run import SyntheticRun


def _profile(capsys: pytest.CaptureFixture[str], run_dir: Path, *extra: str) -> dict:
    assert traces_cli.main(["profile", str(run_dir), "--json", *extra]) == 0
    return orjson.loads(capsys.readouterr().out)


def test_profile_of_a_synthetic_run(finished_run: tuple[Path, SyntheticRun], capsys) -> None:
    run_dir, run = finished_run
    report = _profile(capsys, run_dir, "-n", "5", "--bins", "12")
    phases = {p["name"]: p for p in report["phases"]}
    assert list(phases) == list(PHASES)
    assert sum(p["share"] for p in report["phases"]) == pytest.approx(1.0, abs=1e-9)
    for phase in phases.values():
        assert phase["p50_s"] <= phase["p90_s"] <= phase["p99_s"]
    # The synthetic run reports every split: each of these owns some time.
    for name in ("client_queue", "http", "agent", "engine_queue", "engine_prefill"):
        assert phases[name]["share"] > 0, name
    assert phases["engine_decode"]["share"] > phases["engine_prefill"]["share"]  # 2/3 vs 1/3
    attempts = len(run.rollouts) + len(run.failures) + 6
    assert report["dispatches"] == attempts
    durations = [s["duration_s"] for s in report["stragglers"]]
    assert len(durations) == 5 and durations == sorted(durations, reverse=True)
    assert all(
        s["dominant_phase"] in PHASES and len(s["trace_id"]) == 32 for s in report["stragglers"]
    )
    assert len(report["timeline"]) == 12
    assert sum(p["completions_per_s"] * p["width_s"] for p in report["timeline"]) == pytest.approx(
        attempts
    )
    assert [g["dispatch_name"] for g in report["per_dispatch_name"]] == ["simple_agent"]
    with sqlite3.connect(run_dir / "traces.db") as conn:
        tokens = conn.execute(
            "SELECT SUM(json_extract(attributes, ?)), SUM(json_extract(attributes, ?)) "
            "FROM spans WHERE name = ?",
            (
                f'$."{names.GEN_AI_USAGE_INPUT_TOKENS}"',
                f'$."{names.GEN_AI_USAGE_OUTPUT_TOKENS}"',
                names.SPAN_MODEL_CHAT,
            ),
        ).fetchone()
    accounting = report["accounting"]
    assert (accounting["input_tokens"], accounting["output_tokens"]) == tuple(tokens)
    assert accounting["model_calls"] == 2 * attempts and accounting["tool_calls"] == 2 * attempts
    assert accounting["wall_s"] == pytest.approx(report["wall_s"])


def test_profile_table_names_every_phase(finished_run, capsys) -> None:
    run_dir, _ = finished_run
    assert traces_cli.main(["profile", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "innermost" in out and "stragglers" in out and "accounting:" in out
    for name in PHASES:
        assert name in out


def test_profile_of_a_missing_store_is_one_line(tmp_path: Path, capsys) -> None:
    """The same line and status as the other ``traces`` commands."""
    from rollgym.cli.main import main

    missing = tmp_path / "nowhere"
    assert main(["traces", "profile", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"rollgym traces profile: {missing}: no such run directory or trace store file\n"


@pytest.mark.parametrize("workers", [2, 3])
def test_split_over_processes_gives_the_same_profile(finished_run, workers: int) -> None:
    """Trace-id ranges read by worker processes merge into exactly the one-process answer."""
    from rollgym.reading.profile import open_store, profile_store
    from rollgym.reading.profile_ranges import trace_id_ranges

    run_dir, _ = finished_run
    db = run_dir / "traces.db"
    conn = open_store(db)
    try:
        ranges = trace_id_ranges(conn, workers)
        (traces,) = next(iter(conn.execute("SELECT COUNT(DISTINCT trace_id) FROM dispatches")))
    finally:
        conn.close()
    assert len(ranges) == workers and ranges[0][0] is None and ranges[-1][1] is None
    assert all(a[1] == b[0] and a[1] is not None for a, b in itertools.pairwise(ranges))
    one = profile_store(db, stragglers=7, bins=9, workers=1)
    split = profile_store(db, stragglers=7, bins=9, workers=workers)
    assert split == one
    assert one["dispatches"] >= traces > 0


def test_profile_with_metrics_derived_from_spans(finished_run, capsys) -> None:
    run_dir, run = finished_run
    report = _profile(capsys, run_dir, "--metrics")
    completed = report["metrics"][names.METRIC_ROLLOUT_COMPLETED]
    assert sum(p["value"] for p in completed) == len(run.rollouts) + len(run.failures)
    (queue,) = report["metrics"][names.METRIC_HTTP_CLIENT_QUEUE_DURATION]
    assert queue["count"] > 0 and queue["min"] <= queue["max"]
    assert traces_cli.main(["profile", str(run_dir), "--metrics"]) == 0
    out = capsys.readouterr().out
    assert "metrics (derived from the spans):" in out and names.METRIC_ROLLOUT_IN_FLIGHT in out


def test_an_empty_store_profiles_in_one_range(tmp_path: Path) -> None:
    from rollgym.reading.profile import profile_store
    from rollgym.tracestore.store import TraceStore

    TraceStore(tmp_path / "traces.db").close()
    report = profile_store(tmp_path / "traces.db", workers=2)
    assert report["dispatches"] == 0 and report["timeline"] == [] and report["stragglers"] == []
    assert report["accounting"]["wall_s"] == 0
