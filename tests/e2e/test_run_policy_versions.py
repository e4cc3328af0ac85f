"""``rollgym run`` with a trainer's version file: records, summary and the Parquet columns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import Job, killed_if_left_running, wait_for

from server_specs import simulated_model, walker_servers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _servers() -> dict[str, Any]:
    return walker_servers(model=simulated_model(0.25, accuracy=0.7), episodes=False)


def test_run_follows_the_version_file_and_exports_versions(job: Job, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    version_file = tmp_path / "policy_version"
    version_file.write_text("5\n")
    rows = [{"seed": seed, "hops": 1 + seed % 3} for seed in range(10)]
    job.write(
        _servers(),
        rows,
        agent="walker",
        concurrency=2,
        capture_tokens=True,
        max_staleness=0,
        max_attempts=4,
        policy_version_file=str(version_file),
        telemetry={"preset": "default"},
    )
    proc = job.start(telemetry=True)
    with killed_if_left_running(proc):
        assert wait_for(lambda: job.line_count("rollouts.jsonl") >= 2, timeout=300)
        fresh = tmp_path / "policy_version.tmp"
        fresh.write_text("6\n")
        fresh.replace(version_file)  # the trainer's atomic rewrite
        output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    rollouts = job.rollouts
    assert len(rollouts) + len(job.failures) == 10
    seen = {v for r in rollouts for v in r["policy_versions"]}
    assert seen == {5, 6}, seen
    assert rollouts[0]["policy_versions"][0] == 5
    for record in rollouts:
        assert len(record["policy_versions"]) == record["usage"]["model_calls"]
        assert record["policy_lag"] == 0  # max_staleness 0: only fresh results are written
        assert len(set(record["policy_versions"])) == 1
    for failure in job.failures:
        assert failure["error_kind"] == "stale"
    staleness = job.summary["staleness"]
    assert staleness["results_by_lag"] == {"0": len(rollouts)}
    assert staleness["stale_failures"] == len(job.failures)

    out = job.root / "table.parquet"
    exported = subprocess.run(
        [sys.executable, "-m", "rollgym", "export", str(job.out), "-o", str(out)],
        env=job.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    by_id = {r["rollout_id"]: r for r in rollouts}
    for row in pq.read_table(out).to_pylist():
        record = by_id[row["rollout_id"]]
        assert row["policy_versions"] == [str(v) for v in record["policy_versions"]]
        assert row["policy_lag"] == 0
        tokens = row["token_policy_versions"]
        assert len(tokens) == len(row["completion_ids"]) == len(row["loss_mask"])
        for version, mask in zip(tokens, row["loss_mask"], strict=True):
            assert (version is None) == (mask == 0)
            assert version is None or version in {"5", "6"}

    # the profile's staleness section, from the dispatch spans in the run's trace store
    profiled = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "profile", str(job.out), "--json"],
        env=job.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert profiled.returncode == 0, profiled.stderr
    staleness = orjson.loads(profiled.stdout)["staleness"]
    attempts = sum(r["attempt"] + 1 for r in rollouts) + sum(f["attempt"] + 1 for f in job.failures)
    assert staleness["dispatches"] == attempts
    assert sum(staleness["by_lag"].values()) == attempts
    assert staleness["by_lag"].get("0") == len(rollouts)
    # every attempt before a result's last ran stale (the file changed under it)
    behind = sum(n for lag, n in staleness["by_lag"].items() if lag != "0")
    assert behind == attempts - len(rollouts)
