"""A full disk: one clear line, no temp file left, nothing torn, and an exact resume.

The run's output directory is a small tmpfs (root only: mounting needs it); after the disk
fills, the tmpfs is grown and the same command resumes the run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from e2e_support import Job
from faults_support import assert_exact_accounting, fault_agent

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="mounting a small tmpfs for the output needs root"
    ),
]

ROWS = 400
#: The tmpfs the run's output is put on (the ``small_disk`` fixture).
DISK_SIZE = "48k"


def test_a_full_disk_stops_the_run_clearly_and_a_resume_is_exact(
    job: Job, small_disk: Path, no_leftover_servers: None
) -> None:
    rows = [{"q": i, "padding": "x" * 200} for i in range(ROWS)]
    job.write(
        {"a": fault_agent(delay_s=0.0)},
        rows,
        agent="a",
        concurrency=8,
    )
    proc = job.run(timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rollgym: error:")]
    assert len(errors) == 1, proc.stderr
    assert "No space left on device" in errors[0] and "run the same command again" in errors[0]
    assert list(small_disk.rglob("*.tmp")) == []
    for name in ("rollouts.jsonl", "failures.jsonl"):
        data = (small_disk / name).read_bytes()
        assert not data or data.endswith(b"\n"), f"{name} holds a torn line"
    recorded = job.line_count("rollouts.jsonl") + job.line_count("failures.jsonl")
    assert 0 < recorded < ROWS
    # the disk grows; the same command finishes the run, each rollout exactly once
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    resumed = job.run(timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_exact_accounting(job, ROWS)
    assert job.summary["failed"] == 0
