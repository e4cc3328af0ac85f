"""A bad OpenEnv environment is one line naming it and the protocol step, never a traceback.

Real misbehaving servers on loopback: an OpenEnv environment that refuses to open a session,
one whose step raises, one whose step never answers, a server that answers its WebSocket
off-protocol; and, before any rollout, a server that is not there and an app that does not
import. Each rollout that meets one fails with one line in failures.jsonl naming the
environment and the step; a set-up problem ends ``rollgym run`` with exit status 2 and one
line. No traceback anywhere: not on the console, not in the environment server's log.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from e2e_support import Job, assert_no_traceback, wait_for
from foreign_support import assert_each_failed_in_one_line
from openenv_support import free_port, open_sessions, openenv_server
from test_openenv_environment import rows, servers

from rollgym.builtins.envs.openenv import OpenEnvEnv
from rollgym.servers import SetupProblem

pytest.importorskip(
    "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
)

pytestmark = pytest.mark.e2e

RUN: dict[str, Any] = {
    "agent": "player",
    "environment_routes": {"guesses": "guess"},
    "max_attempts": 1,
}


@pytest.mark.parametrize(
    ("mode", "step", "says"),
    [
        ("refuse", "open session", "the environment could not be created"),
        ("raise", "step", "the referee fell asleep"),
        ("hang", "step", "no answer within 2 s"),
    ],
)
def test_a_failing_openenv_environment_fails_its_rollouts_in_one_line(
    job: Job, mode: str, step: str, says: str
) -> None:
    with openenv_server(job.root / "openenv.log", mode=mode) as url:
        job.write(servers(openenv_url=url, answer_timeout_s=2), rows(4), **RUN)
        proc = job.run(timeout=180)
        assert_each_failed_in_one_line(job, proc, 4, "environment 'guess'", f"{step}: ", says)
        assert_no_traceback(job.out, proc.stdout, proc.stderr)
        # the sessions the failed rollouts opened are closed on the OpenEnv side too
        if mode != "refuse":
            assert wait_for(lambda: open_sessions(url) == 0, timeout=60), open_sessions(url)


def test_an_off_protocol_server_fails_its_rollouts_in_one_line(job: Job) -> None:
    with openenv_server(job.root / "server.log", app="openenv_offprotocol:app") as url:
        job.write(servers(openenv_url=url), rows(4), **RUN)
        proc = job.run(timeout=180)
        assert_each_failed_in_one_line(
            job, proc, 4, "environment 'guess'", "reset: answered off-protocol"
        )
        assert_no_traceback(job.out, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ({"openenv_url": "http://127.0.0.1:{port}"}, "servers.guess.openenv_url: OpenEnv server"),
        (
            {"openenv_app": "no_such_module:app"},
            "servers.guess.openenv_app: cannot import 'no_such_module'",
        ),
        ({"openenv_app": "openenv_support:free_port"}, "servers.guess.openenv_app:"),
    ],
)
def test_an_openenv_environment_that_cannot_start_ends_the_run_in_one_line(
    job: Job, where: dict[str, str], says: str
) -> None:
    where = {k: v.format(port=free_port()) for k, v in where.items()}
    job.write(servers(**where), rows(4), **RUN)
    proc = job.run(timeout=180)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert says in proc.stderr, proc.stderr
    assert_no_traceback(job.out, proc.stdout, proc.stderr)


def _hosted_apps() -> set[int | None]:
    return {t.ident for t in threading.enumerate() if t.name == "openenv-app"}


def test_an_app_served_here_that_is_not_openenv_is_stopped_at_once() -> None:
    """An app rollgym serves itself whose ``/schema`` is missing: the start-up fails in one
    line naming the request, and the app's server (a thread of this process) is stopped then,
    not left serving until the process ends."""
    before = _hosted_apps()
    with pytest.raises(SetupProblem, match="GET /schema answered HTTP 404") as refused:
        OpenEnvEnv.build("guess", {"openenv_app": "openenv_offprotocol:no_schema_app"})
    assert refused.value.key == "openenv_app", refused.value
    assert wait_for(lambda: not _hosted_apps() - before, timeout=30), "the app still serves"
