"""Removing the traces a tail-sampled run dropped from its store: every span, link and
dispatch row of each dropped trace, nothing of any other."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import orjson

from rollgym.cli import traces as traces_cli
from rollgym.tracestore.tail_drop import remove_traces


def _per_trace(db: Path) -> dict[bytes, Counter[str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT trace_id, name FROM spans").fetchall()
    out: dict[bytes, Counter[str]] = {}
    for trace_id, name in rows:
        out.setdefault(trace_id, Counter())[name] += 1
    return out


def test_dropped_traces_leave_whole_and_the_others_stay_as_they_were(finished_run, tmp_path):
    run_dir, run = finished_run
    db = tmp_path / "traces.db"
    shutil.copyfile(run_dir / "traces.db", db)  # the module's store stays as it was
    before = _per_trace(db)
    rollout_traces = [bytes.fromhex(r["trace_id"]) for r in run.rollouts]
    dropped = rollout_traces[::3]
    removed = remove_traces(db, [*dropped, bytes(16)])  # an id no trace has: not counted
    after = _per_trace(db)
    assert removed.traces == len(dropped)
    assert removed.spans == sum(sum(before[t].values()) for t in dropped)
    assert set(after) == set(before) - set(dropped)
    assert all(after[t] == before[t] for t in after)  # the kept ones, span for span
    with sqlite3.connect(db) as conn:
        for table in ("links", "dispatches"):
            left = conn.execute(f"SELECT DISTINCT trace_id FROM {table}").fetchall()
            assert not {t for (t,) in left} & set(dropped), table
    assert remove_traces(db, []) == (0, 0)


def _check(run_dir: Path, capsys) -> tuple[int, dict]:
    code = traces_cli.main(["check", str(run_dir), "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_check_holds_a_tail_sampled_run_to_dropped_traces_leaving_whole(
    finished_run, tmp_path, capsys
):
    """``traces check`` on a tail-sampled run: rows marked dropped whose traces are still in
    the store are half kept (a violation); once removed, the run passes."""
    source, run = finished_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    dropped = rows[::4]
    for row in dropped:
        row["trace_sampled"] = False
    (run_dir / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["telemetry"] = {"tail_sampling": {"traces_dropped": len(dropped)}}
    (run_dir / "summary.json").write_text(json.dumps(summary))

    code, report = _check(run_dir, capsys)
    assert code == 1
    half_kept = [v for v in report["violations"] if v["rule"] == "dropped_trace_removed"]
    assert {v["trace_id"] for v in half_kept} == {r["trace_id"] for r in dropped}

    remove_traces(run_dir / "traces.db", [bytes.fromhex(r["trace_id"]) for r in dropped])
    code, report = _check(run_dir, capsys)
    assert code == 0, report["violations"]
    assert report["stats"]["rollouts.jsonl_unsampled"] == len(dropped)
