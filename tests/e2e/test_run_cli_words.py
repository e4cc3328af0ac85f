"""What ``rollgym run`` says in three corners: an empty ``/dev/null`` input, an override that
is not YAML, a rerun with nothing left but failures recorded."""

from __future__ import annotations

import pytest
from e2e_support import Job, agent

pytestmark = pytest.mark.e2e


def test_dev_null_is_an_empty_input(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    done = job.run("run.input=/dev/null")
    assert done.returncode == 0, done.stderr
    assert "does not exist" not in done.stderr
    assert "nothing ran: the input has no rows" in " ".join(done.stdout.split())
    assert job.summary["requested"] == 0


def test_an_override_that_is_not_yaml_is_one_line(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    done = job.run("run.concurrency=[1")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "rollgym: config error: override run.concurrency=[1: run.concurrency: the value '[1' is "
        "not valid YAML: expected ',' or ']', but got '<stream end>' at column 3"
    ]


def test_a_rerun_with_nothing_left_but_failures_names_retry_failed(job: Job) -> None:
    job.write(
        {"a": agent("agents:AlwaysFailAgent")},
        [{"q": i} for i in range(3)],
        agent="a",
        max_attempts=1,
    )
    first = job.run("--no-table")
    assert first.returncode == 0 and len(job.failures) == 3
    rerun = job.run("--no-table")
    assert rerun.returncode == 0, rerun.stderr
    lines = [line for line in rerun.stderr.splitlines() if "nothing left to run" in line]
    assert lines == [
        "rollgym: nothing left to run: all 3 rollouts were recorded by earlier sessions, 3 of "
        "them as failed; to run the failed ones again, add run.retry_failed=true"
    ]
    assert len(job.failures) == 3  # nothing ran again
