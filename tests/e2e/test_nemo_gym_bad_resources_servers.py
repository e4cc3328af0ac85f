"""A bad NeMo Gym resource server is one line naming it and the protocol step, never a traceback.

Real misbehaving resource servers (``nemo_gym_notebook.py`` in its bad modes) on loopback: one
whose ``/seed_session`` raises, one whose ``/verify`` answers without a reward, one whose tool
never answers; and, before any rollout, a URL where nothing listens, a server that is not a
resource server, and a resource server rollgym starts that exits before serving. Each rollout
that meets one fails with one line in failures.jsonl naming the environment and the step; a
set-up problem ends ``rollgym run`` with exit status 2 and one line.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from e2e_support import Job, assert_no_traceback, free_port, wait_for
from foreign_support import assert_each_failed_in_one_line
from nemo_gym_support import (
    NOTEBOOK,
    PYTHON,
    needs_nemo_gym,
    notebook_rows,
    notebook_server,
    session_counts,
)
from test_nemo_gym_resources_servers import servers

pytestmark = [pytest.mark.e2e, needs_nemo_gym]

RUN: dict[str, Any] = {"agent": "player", "max_attempts": 1}


def no_traceback(job: Job, *texts: str) -> None:
    """Not on the console, not in rollgym's logs (the resource server's own log is its own)."""
    assert_no_traceback(job.out, *texts, except_logs=".nemo_gym.log")


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("seed_fails", "seed_session: answered HTTP 500"),
        ("verify_off", "verify: answered off-protocol (no 'reward')"),
        ("tool_hangs", "reveal: no answer within 2 s"),
    ],
)
def test_a_failing_resource_server_fails_its_rollouts_in_one_line(
    job: Job, mode: str, says: str
) -> None:
    with notebook_server(job.root / "notebook.log", mode=mode) as url:
        job.write(servers(resources_url=url, answer_timeout_s=2), notebook_rows(4), **RUN)
        proc = job.run(timeout=180)
        assert_each_failed_in_one_line(job, proc, 4, "environment 'nemo'", url, says)
        no_traceback(job, proc.stdout, proc.stderr)
        # every session the failed rollouts seeded is closed on the resource server too
        assert wait_for(lambda: session_counts(url)["open"] == 0, timeout=60), session_counts(url)


def test_a_resource_server_that_cannot_start_ends_the_run_in_one_line(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTEBOOK_MODE", "no_start")
    job.write(servers(resources_server=str(NOTEBOOK), python=str(PYTHON)), notebook_rows(4), **RUN)
    proc = job.run(timeout=180)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "servers.nemo.resources_server: NeMo Gym resource server" in proc.stderr
    assert "exited with status 3 before serving: the notebook has no pages" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    no_traceback(job, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("nothing", "GET /openapi.json failed"),
        ("not_fastapi", "GET /openapi.json answered HTTP 404"),
        ("no_python", "cannot run '/no/such/python'"),
    ],
)
def test_a_resource_server_that_is_not_one_ends_the_run_in_one_line(
    job: Job, where: str, says: str
) -> None:
    port = free_port()
    other = None
    if where == "not_fastapi":
        other = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=job.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(lambda: _listens(port), timeout=30)
    try:
        if where == "no_python":
            spec = servers(resources_server=str(NOTEBOOK), python="/no/such/python")
            key = "resources_server"
        else:
            spec = servers(resources_url=f"http://127.0.0.1:{port}")
            key = "resources_url"
        job.write(spec, notebook_rows(4), **RUN)
        proc = job.run(timeout=180)
        assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"servers.nemo.{key}: NeMo Gym resource server" in proc.stderr, proc.stderr
        assert says in proc.stderr, proc.stderr
        no_traceback(job, proc.stdout, proc.stderr)
    finally:
        if other is not None:
            other.terminate()
            other.wait(timeout=20)


def _listens(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
