"""Every bad input of SPEC.md gets an error naming where it is, and loses nothing finished."""

from __future__ import annotations

import pytest
from e2e_support import Job, agent

pytestmark = pytest.mark.e2e


def test_bad_rows_become_failures_naming_file_line_field(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [
        {"q": 0},
        '{"q": 1',  # malformed JSON (line 2)
        "[1, 2, 3]",  # not an object (line 3)
        {"q": 3, "attempt": [1]},  # identity field of the wrong type (line 4)
        {"q": 4, "rollout_id": 17},  # explicit id of the wrong type (line 5)
        {"q": 5, "agent": "ghost"},  # unknown agent (line 6)
        {"q": 6, "task_id": {"taskset": "nowhere", "task_id": 1}},  # no route: run.agent applies
        {"q": 7},
    ]
    job.write({"a": agent()}, rows, agent="a")
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_line = {f["line"]: f for f in job.failures}
    path = str(job.input)
    assert by_line[2]["error_kind"] == "invalid_row" and by_line[2]["message"].startswith(
        f"{path}:2: malformed JSON"
    )
    assert (
        by_line[3]["error_kind"] == "invalid_row"
        and "expected a JSON object" in by_line[3]["message"]
    )
    assert by_line[4]["error_kind"] == "invalid_row" and "field 'attempt'" in by_line[4]["message"]
    assert (
        by_line[5]["error_kind"] == "invalid_row" and "field 'rollout_id'" in by_line[5]["message"]
    )
    assert (
        by_line[6]["error_kind"] == "unknown_agent"
        and f"{path}:6: field 'agent'" in by_line[6]["message"]
    )
    assert by_line[6]["rollout_id"] == "5-0"
    assert sorted(r["rollout_id"] for r in job.rollouts) == ["0-0", "6-0", "7-0"]
    summary = job.summary
    assert summary["requested"] == 8 and summary["completed"] == 3 and summary["failed"] == 5


def test_unknown_route_without_default_agent(job: Job, no_leftover_servers: None) -> None:
    job.write({"a": agent()}, [{"task_id": {"taskset": "nowhere", "task_id": 1}}, {"agent": "a"}])
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (failure,) = job.failures
    assert failure["error_kind"] == "unknown_route" and failure["line"] == 1
    assert "field 'task_id': task set 'nowhere'" in failure["message"]
    assert [r["rollout_id"] for r in job.rollouts] == ["1-0"]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("run.concurency=4", "run.concurency: unknown key"),
        ("run.concurrency=many", "run.concurrency: Input should be a valid integer"),
        ("run.agent=ghost", "run.agent: names 'ghost'"),
        ("servers.a.bogus_option=1", "servers.a.bogus_option: unknown key"),
    ],
)
def test_config_errors_name_file_and_key_before_any_server_starts(
    job: Job, override: str, expected: str, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    proc = job.run(override)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert not job.out.exists() or not (job.out / "rollouts.jsonl").exists()


def test_config_key_that_does_not_exist_in_the_file(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a", not_a_key=1)
    proc = job.run()
    assert proc.returncode == 2
    assert f"{job.config_path}: run.not_a_key: unknown key" in proc.stderr
