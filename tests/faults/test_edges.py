"""Edges of hostile-but-fair use: bad keys, bad configs, duplicate ids, absent servers."""

from __future__ import annotations

import socket
import subprocess

import pytest
from e2e_support import Job, agent
from faults_support import assert_exact_accounting

from server_specs import solver_servers

pytestmark = pytest.mark.e2e


def test_an_upstream_401_is_a_permanent_authentication_failure_naming_the_key(
    job: Job, no_leftover_servers: None
) -> None:
    servers = {
        "engine": {"kind": "model", "impl": "fault_parts:KeyRefusingModel"},
        **solver_servers(
            model={
                "kind": "model",
                "impl": "openai",
                "upstream": "engine",
                "model_name": "m",
                "api_key_env": "ROLLGYM_FAULT_KEY",
            }
        ),
    }
    job.write(servers, [{"question": f"{i} + 1"} for i in range(4)], agent="solver", max_attempts=3)
    env = {**job.env(), "ROLLGYM_FAULT_KEY": "sk-wrong"}
    proc = subprocess.run(job.command(), env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_exact_accounting(job, 4)
    assert job.summary["failed_by_kind"] == {"authentication": 4}
    for failure in job.failures:
        assert failure["attempt"] == 0, "a refused key must not be retried"
        assert "401" in failure["message"] and "ROLLGYM_FAULT_KEY" in failure["message"]
        assert "sk-wrong" not in failure["message"]


def test_duplicate_explicit_ids_are_invalid_rows_and_nothing_is_written_twice(
    job: Job, no_leftover_servers: None
) -> None:
    rows = [
        {"q": 0, "rollout_id": "dup"},
        {"q": 1, "rollout_id": "dup"},
        {"q": 2, "rollout_id": "dup-r1"},
        {"q": 3, "rollout_id": "other"},
    ]
    job.write({"a": agent()}, rows, agent="a", repeats=2)
    proc = job.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_exact_accounting(job, 4, repeats=2)
    assert sorted(r["rollout_id"] for r in job.rollouts) == ["dup", "dup-r1", "other", "other-r1"]
    bad = sorted(job.failures, key=lambda f: f["line"])
    assert [(f["line"], f["error_kind"], f["rollout_id"]) for f in bad] == [
        (2, "invalid_row", None),
        (3, "invalid_row", None),
    ]
    assert f"{job.input}:2: field 'rollout_id'" in bad[0]["message"]
    assert "line 1" in bad[-1]["message"] and "repeat 1 of 'dup'" in bad[-1]["message"]


def test_a_url_server_refusing_connections_fails_fast(job: Job) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job.write(
        {"gone": {"kind": "agent", "url": f"http://127.0.0.1:{port}"}}, [{"q": 0}], agent="gone"
    )
    proc = job.run(timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the refusal rule fired, not the 60 s health deadline
    assert "refusing connections for 5 s: nothing listens there" in proc.stderr
    assert "server 'gone'" in proc.stderr


def test_a_config_that_is_not_utf8_is_a_clear_error(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    text = job.config_path.read_bytes()
    job.config_path.write_bytes(text + b"# caf\xe9\n")
    proc = job.run()
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "not UTF-8 text (byte 0xe9" in proc.stderr and str(job.config_path) in proc.stderr


def test_an_input_that_is_a_directory_is_named_as_such(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    proc = job.run(f"run.input={job.root}")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{job.root} is a directory, not a JSONL file" in proc.stderr


def test_a_resume_with_nothing_left_reports_no_rate_not_zero(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": i} for i in range(5)], agent="a")
    first = job.run()
    assert first.returncode == 0, first.stdout + first.stderr
    assert job.summary["rollouts_per_s"] > 0
    again = job.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert_exact_accounting(job, 5)
    assert job.summary["rollouts_per_s"] is None
    printed = " ".join(again.stdout.split())  # rich wraps long lines
    assert "nothing left to run" in printed and "0.0 rollouts/s" not in printed
