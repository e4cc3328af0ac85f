"""A bad ORS environment is one line naming it and the protocol step, never a traceback.

Real misbehaving servers on loopback: an ORS environment whose setup() raises (it refuses to
start a session), one whose tool raises, one whose tool never answers, a server that answers
off-protocol; and, before any rollout, a server that is not there, a module that does not
import, an object that is not an ORS environment. Each rollout that meets one fails with one
line in failures.jsonl naming the environment and the step; a set-up problem ends ``rollgym
run`` with exit status 2 and one line. No traceback on the console nor in rollgym's logs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e_support import Job, wait_for
from foreign_support import assert_each_failed_in_one_line
from openenv_support import free_port
from ors_support import (
    ENVS,
    OrsJob,
    open_sessions,
    ors_server,
    require_openreward,
    rows,
    servers,
)

require_openreward()

pytestmark = pytest.mark.e2e

RUN = {"agent": "player", "environment_routes": {"guesses": "guess"}, "max_attempts": 1}


def no_traceback(job: Job, *texts: str) -> None:
    logs = (
        [p.read_text() for p in (job.out / "logs").glob("*.log") if ".ors." not in p.name]
        if (job.out / "logs").exists()
        else []
    )
    for text in (*texts, *logs):
        assert "Traceback" not in text, text[-3000:]


@pytest.mark.parametrize(
    ("mode", "step", "says"),
    [
        ("refuse", ": answered HTTP 500", "the board is missing"),
        ("raise", "guess: raised", "the referee fell asleep"),
        ("hang", "guess: no answer within 2 s", ""),
    ],
)
def test_a_failing_ors_environment_fails_its_rollouts_in_one_line(
    tmp_path: os.PathLike[str], mode: str, step: str, says: str
) -> None:
    job = OrsJob(tmp_path)  # type: ignore[arg-type]
    with ors_server(job.root / "ors.log", job.sessions, mode=mode) as url:
        job.write(servers(ors_url=url, answer_timeout_s=2), rows(4), **RUN)
        proc = job.run(timeout=240)
        assert_each_failed_in_one_line(job, proc, 4, "environment 'guess'", step, says)
        no_traceback(job, proc.stdout, proc.stderr)
        # the sessions the failed rollouts opened are closed on the environment's side too
        assert wait_for(lambda: open_sessions(job.sessions) == 0, timeout=60), job.sessions


def test_an_off_protocol_server_fails_its_rollouts_in_one_line(job: Job) -> None:
    port = free_port()
    with (job.root / "server.log").open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "ors_offprotocol:app", "--port", str(port)]
            + ["--host", "127.0.0.1", "--log-level", "warning"],
            env={**os.environ, "PYTHONPATH": str(ENVS)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        job.write(servers(ors_url=f"http://127.0.0.1:{port}"), rows(4), **RUN)
        proc = job.run(timeout=240)
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert_each_failed_in_one_line(
        job,
        proc,
        4,
        "environment 'guess'",
        "create_session: answered off-protocol: application/json",
    )
    no_traceback(job, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ({"ors_url": "http://127.0.0.1:{port}"}, "servers.guess.ors_url: ORS server"),
        (
            {"ors_environment": "no_such_module:Guess"},
            "servers.guess.ors_environment: ORS environment 'no_such_module:Guess': exited "
            "with status 2 before serving: cannot import 'no_such_module'",
        ),
        (
            {"ors_environment": "ors_guess:TASKS"},
            "not an openreward Environment class",
        ),
        (
            {"ors_url": "http://127.0.0.1:{port}", "env_name": "chess"},
            "servers.guess.env_name:",
        ),
    ],
)
def test_an_ors_environment_that_cannot_start_ends_the_run_in_one_line(
    tmp_path: os.PathLike[str], where: dict[str, str], says: str
) -> None:
    job = OrsJob(tmp_path)  # type: ignore[arg-type]
    if "env_name" in where:  # a real server, without the environment named
        with ors_server(job.root / "ors.log", job.sessions) as url:
            job.write(servers(**{**where, "ors_url": url}), rows(4), **RUN)
            proc = job.run(timeout=240)
    else:
        where = {k: v.format(port=free_port()) for k, v in where.items()}
        job.write(servers(**where), rows(4), **RUN)
        proc = job.run(timeout=240)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
    no_traceback(job, proc.stdout, proc.stderr)
