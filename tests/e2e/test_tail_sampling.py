"""Tail sampling in a real run (the real CLI, its servers on loopback, the local store).

The same rows run twice: unsampled, then with ``telemetry.tail_sampling``. Some rows are
broken (a keychain walk whose seed is not a number: the environment refuses the task and the
rollout fails). In the tail-sampled run every failed rollout's trace is kept, each dropped
one is gone from the store whole, every kept rollout has exactly the spans it has in the
unsampled run, ``summary.json`` counts every decision by reason, and ``traces check`` passes.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from telemetry_helpers import TracedJob, quick_rows, quick_servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Ordinary rows (arithmetic and keychain walks) and broken ones.
ORDINARY = quick_rows(24, 12, 0)
BROKEN = [{"agent": "walker", "seed": f"not-a-number-{i}", "hops": 2} for i in range(4)]
ROWS = ORDINARY[:10] + BROKEN[:2] + ORDINARY[10:] + BROKEN[2:]
TAIL = {"share": 0.25, "slow_percentile": None}


def _run(root: Path, tail: dict[str, Any] | None) -> TracedJob:
    job = TracedJob(root)
    telemetry: dict[str, Any] = {"preset": "default"}
    if tail is not None:
        telemetry["tail_sampling"] = tail
    job.write(quick_servers(0.0), ROWS, telemetry=telemetry, agent="solver", max_attempts=1)
    proc = job.run()
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert len(job.rollouts) + len(job.failures) == len(ROWS)
    return job


def _spans_by_rollout(db: Path) -> dict[str, Counter[tuple[str, str]]]:
    """Each rollout's spans as (name, parent's name) pairs: its trace's shape."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT s.trace_id, s.name, p.name, d.rollout_id FROM spans s "
            "JOIN dispatches d ON d.trace_id = s.trace_id AND d.is_root = 1 "
            "LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_span_id"
        ).fetchall()
    out: dict[str, Counter[tuple[str, str]]] = {}
    for _, name, parent, rollout_id in rows:
        out.setdefault(rollout_id, Counter())[(name, parent or "")] += 1
    return out


def _trace_ids(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {t.hex() for (t,) in conn.execute("SELECT DISTINCT trace_id FROM spans")}


def test_a_tail_sampled_run_keeps_every_failure_whole_and_drops_the_rest_whole(
    tmp_path: Path,
) -> None:
    full = _run(tmp_path / "full", None)
    tail = _run(tmp_path / "tail", TAIL)
    full_spans, tail_spans = _spans_by_rollout(full.db), _spans_by_rollout(tail.db)
    stored = _trace_ids(tail.db)

    # every failed rollout kept, whole: the same spans as in the unsampled run
    assert len(tail.failures) == len(BROKEN)
    for failure in tail.failures:
        assert failure.get("trace_sampled", True) is True, failure
        assert failure["trace_id"] in stored
        assert tail_spans[failure["rollout_id"]] == full_spans[failure["rollout_id"]]

    kept = [r for r in tail.rollouts if r.get("trace_sampled", True)]
    dropped = [r for r in tail.rollouts if r.get("trace_sampled") is False]
    assert kept and dropped
    for row in kept:  # a kept rollout: exactly its spans of the unsampled run
        assert row["trace_id"] in stored
        assert tail_spans[row["rollout_id"]] == full_spans[row["rollout_id"]], row
    for row in dropped:  # a dropped one: no span of it anywhere in the store
        assert row["trace_id"] not in stored
        assert row["rollout_id"] not in tail_spans
    assert set(tail_spans) == {r["rollout_id"] for r in [*kept, *tail.failures]}

    # exact counts, by reason
    counts = json.loads((tail.out / "summary.json").read_text())["telemetry"]["tail_sampling"]
    assert counts["traces_kept_by_reason"]["failed"] == len(BROKEN)
    assert counts["traces_kept_by_reason"]["share"] == len(kept)
    assert counts["traces_kept"] == len(kept) + len(BROKEN)
    assert counts["traces_dropped"] == len(dropped) == counts["traces_removed"]
    assert counts["spans_removed"] == sum(
        sum(full_spans[r["rollout_id"]].values()) for r in dropped
    )

    check = tail.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
