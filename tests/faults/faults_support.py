"""What every fault test asserts about a finished (or resumed) run: exact accounting."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2e_support import Job, wait_for

from procs import each_process


def fault_agent(**options: object) -> dict[str, object]:
    """A server spec of the fault suite's agent (``fault_parts:FaultAgent``) with ``options``."""
    return {"kind": "agent", "impl": "fault_parts:FaultAgent", **options}


def store_pid(job: Job) -> int | None:
    """The run's trace store process (its command line names the run's traces.db)."""
    db = str(job.out / "traces.db").encode()
    for pid, (cmdline,) in each_process("cmdline"):
        if b"rollgym.cli.traces" in cmdline and db in cmdline:
            return pid
    return None


def signal_store_once(job: Job, rollouts: int, sig: int, timeout: float = 180) -> int:
    """Once the running ``job`` has ``rollouts`` rollouts, send ``sig`` to its trace store;
    the store's pid."""
    assert wait_for(lambda: job.line_count("rollouts.jsonl") >= rollouts, timeout=timeout)
    pid = store_pid(job)
    assert pid is not None, "the run has no trace store process"
    os.kill(pid, sig)
    return pid


def assert_exact_accounting(job: Job, rows: int, repeats: int = 1) -> None:
    """requested == completed + failed == rows x repeats (a row that is an ``invalid_row``
    counts once); every rollout recorded exactly once (no duplicate, no lost one); every line
    of the output files whole (no torn row)."""
    for name in ("rollouts.jsonl", "failures.jsonl"):
        path = job.out / name
        if path.exists():
            data = path.read_bytes()
            assert not data or data.endswith(b"\n"), f"{name} ends with a torn line"
    summary = job.summary
    invalid = {f["task_index"] for f in job.failures if f["error_kind"] == "invalid_row"}
    expected = {(t, r) for t in range(rows) for r in range(1 if t in invalid else repeats)}
    requested = len(expected)
    assert summary["requested"] == summary["completed"] + summary["failed"] == requested, summary
    assert summary["completed"] == len(job.rollouts)
    assert summary["failed"] == len(job.failures)
    keys = Counter(
        (r["task_index"], r.get("rollout_index") or 0) for r in job.rollouts + job.failures
    )
    assert [k for k, n in keys.items() if n > 1] == [], "a rollout was recorded twice"
    assert set(keys) == expected, f"lost rollouts: {sorted(expected - set(keys))[:10]}"
    ids = [r["rollout_id"] for r in job.rollouts + job.failures if r.get("rollout_id")]
    assert len(ids) == len(set(ids)), "a rollout id appears twice"


@contextmanager
def output_on_tmpfs(job: Job, size: str) -> Iterator[Path]:
    """The run's output directory on a tmpfs of ``size`` (``mount -o size=``), unmounted
    after; the test is skipped, saying why, where it cannot be mounted (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the output needs root")
    job.out.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(job.out)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield job.out
    finally:
        subprocess.run(["umount", "-l", str(job.out)], check=False)
