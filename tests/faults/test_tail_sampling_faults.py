"""Tail sampling against a mix of faults (``fault_parts``): with no share of the ordinary
rollouts kept, the store holds exactly the traces of the attempts that failed or timed out,
each counted under its reason, and none of the attempts that went well."""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from e2e_support import pythonpath
from telemetry_helpers import TracedJob

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: fault -> the reasons its attempts are kept under (max_attempts=2), one per attempt
KEPT = {
    "ok": [],
    "5xx_once": ["failed"],  # the first attempt failed, the retry went well (dropped)
    "5xx": ["failed", "failed"],
    "no_reward": ["failed"],  # permanent: one attempt
    "hang": ["timeout", "timeout"],
}


def test_every_failed_and_timed_out_attempt_is_kept_and_no_other(tmp_path: Path) -> None:
    faults = list(KEPT)
    rows = [{"q": i, "fault": faults[i % len(faults)]} for i in range(20)]
    job = TracedJob(tmp_path / "run")
    servers = {
        "env": {"kind": "environment", "impl": "fault_parts:FaultEnv"},
        "a": {"kind": "agent", "impl": "fault_parts:FaultAgent", "environment": "env"},
    }
    telemetry = {"preset": "default", "tail_sampling": {"share": 0.0, "slow_percentile": None}}
    # 6 s per attempt: far past any quick attempt on a loaded machine, so only the hang rows
    # time out (a quick one timing out would be kept as "timeout" and break the counts)
    job.write(servers, rows, telemetry=telemetry, agent="a", max_attempts=2, timeout_s=6)
    here = str(Path(__file__).resolve().parent)  # the servers import fault_parts from here
    proc = job.run(env={"PYTHONPATH": os.pathsep.join([here, pythonpath()])}, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]

    expected = Counter(reason for row in rows for reason in KEPT[row["fault"]])
    counts = json.loads((job.out / "summary.json").read_text())["telemetry"]["tail_sampling"]
    kept = {k: v for k, v in counts["traces_kept_by_reason"].items() if v}
    assert kept == dict(expected)
    attempts = sum(len(KEPT[r["fault"]]) for r in rows) + sum(
        1 for r in rows if r["fault"] in ("ok", "5xx_once")
    )
    assert counts["traces_decided"] == attempts
    assert counts["traces_dropped"] == attempts - sum(expected.values())

    with sqlite3.connect(job.db) as conn:
        dispatches = conn.execute(
            "SELECT rollout_id, outcome FROM dispatches WHERE is_root = 1"
        ).fetchall()
    assert len(dispatches) == sum(expected.values())
    assert all(outcome in ("error", "timeout") for _, outcome in dispatches)
    # what went well left nothing: neither the ok rows nor the retries that succeeded
    assert all(r.get("trace_sampled") is False for r in job.rollouts)
    assert all(f.get("trace_sampled", True) for f in job.failures)
    check = job.traces_check()
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
