"""A real run against a `url:` agent with credentials that answers too much or redirects away.

Checks, end to end: the credentials are used (basic auth) and never written (config.yaml,
traces.db, logs, summary, progress, records); an answer past ``run.max_response_bytes`` and a
302 to another host are permanent failures that say so; the other rows succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Job
from hostile_agent import HostileAgent

SECRET = "hunter2-s3cret"


@pytest.fixture
def hostile() -> Iterator[HostileAgent]:
    server = HostileAgent(("alice", SECRET)).start()
    yield server
    server.stop()


def _every_file(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


def test_url_agent_credentials_sizes_and_redirects(job: Job, hostile: HostileAgent) -> None:
    rows = [
        {"mode": "ok"},
        {"mode": "huge", "size": 8 << 20},
        {"mode": "redirect"},
        {"mode": "ok", "pad": "p" * 4096},
    ]
    job.write(
        {"hostile": {"kind": "agent", "url": hostile.url()}},
        rows,
        agent="hostile",
        max_response_bytes=1 << 20,
        max_request_bytes=4096,
        telemetry={"preset": "default"},
    )
    done = job.run(telemetry=True, timeout=180)
    assert done.returncode in (0, 1), done.stderr
    assert SECRET not in done.stdout + done.stderr
    by_task = {r["task_index"]: r for r in job.rollouts + job.failures}
    assert by_task[0]["reward"] == 1.0
    assert by_task[1]["error_kind"] == "response_too_large"
    assert "run.max_response_bytes" in by_task[1]["message"]
    assert by_task[2]["error_kind"] == "redirect_refused"
    assert by_task[2]["message"].startswith("redirect to another host refused:")
    assert by_task[3]["error_kind"] == "request_too_large"
    assert "run.max_request_bytes" in by_task[3]["message"]
    assert hostile.redirect_hits == 0
    assert all(a is not None and a.startswith("Basic ") for a in hostile.auth_seen)
    files = _every_file(job.out)
    assert job.out / "traces.db" in files and job.out / "config.yaml" in files
    leaks = [str(path) for path, data in files.items() if SECRET.encode() in data]
    assert leaks == []
    assert b"REDACTED:REDACTED@127.0.0.1" in files[job.out / "config.yaml"]
