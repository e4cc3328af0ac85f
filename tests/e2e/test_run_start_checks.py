"""A server's broken set-up ends ``rollgym run`` before its first rollout, in one line.

The real CLI with each broken set-up: an ``impl:`` module that raises at import, an agent on
the OpenAI SDK where the ``openai`` package is missing (hidden from every process of the run
the way the unit tests hide uvloop and httptools: ``sys.modules["openai"] = None``, here from
a ``sitecustomize`` on PYTHONPATH, so the driver, the fork server and each server lack it), and
an ``api_key_env`` naming a variable that is not set. Each: exit status 2 (a config error),
stderr one line naming ``servers.<name>.<key>`` and the problem, no traceback anywhere on the
console, no rollout run, and no server left behind; with the servers forked by the fork
server and spawned one by one alike.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from e2e_support import Job

from server_specs import quickstart_servers

pytestmark = pytest.mark.e2e

ROWS = [{"agent": "solver", "question": "1 + 2"}, {"agent": "solver", "question": "2 + 3"}]
RAISES_AT_IMPORT = """\
from rollgym.servers import Agent

SETTINGS = {"retries": 3}
SETTINGS["timeout"]  # the author's bug: a KeyError at import


class Solver(Agent):
    pass
"""
RAISES_IN_THE_SERVER_ONLY = """\
import os

from rollgym.servers import Agent

SERVING = ("_ROLLGYM_SERVER_SPEC", "_ROLLGYM_FORK_SERVER_FD")  # a server, or the fork server
if any(name in os.environ for name in SERVING):  # imports in the driver, not in a server
    raise RuntimeError("no GPU here")


class Solver(Agent):
    pass
"""
HIDE_OPENAI = 'import sys\n\nsys.modules["openai"] = None  # import openai: ModuleNotFoundError\n'


@pytest.fixture(autouse=True, params=["forked", "spawned"])
def started(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case with the servers forked by the fork server, and spawned one by one."""
    if request.param == "spawned":
        monkeypatch.setenv("ROLLGYM_FORK_SERVER", "0")


def _run(
    job: Job, env: dict[str, str] | None = None, *overrides: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        job.command(*overrides),
        env=env or job.env(),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=job.root,
    )


def _assert_one_line(result: subprocess.CompletedProcess[str], job: Job, *needles: str) -> None:
    console = result.stdout + result.stderr
    assert result.returncode == 2, console
    assert "Traceback" not in console, console
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, console
    assert lines[0].startswith("rollgym: config error: "), console
    for needle in needles:
        assert needle in lines[0], console
    assert not job.records("rollouts.jsonl") and not job.records("failures.jsonl")


def _solver(**spec: Any) -> dict[str, Any]:
    return quickstart_servers(solver=spec, walker=None, keys=None)


def test_an_impl_module_that_raises_at_import(job: Job, no_leftover_servers: None) -> None:
    job.root.mkdir(parents=True, exist_ok=True)
    (job.root / "broken_agent.py").write_text(RAISES_AT_IMPORT, encoding="utf-8")
    job.write(_solver(impl="broken_agent:Solver"), ROWS)
    result = _run(job)
    _assert_one_line(
        result,
        job,
        "servers.solver.impl",
        f"{job.root / 'broken_agent.py'}:4",
        "KeyError: 'timeout'",
    )


def test_an_impl_module_that_raises_only_in_its_server(job: Job, no_leftover_servers: None) -> None:
    """The driver's check passes; the server process's own import fails: still one line."""
    job.root.mkdir(parents=True, exist_ok=True)
    (job.root / "gpu_agent.py").write_text(RAISES_IN_THE_SERVER_ONLY, encoding="utf-8")
    job.write(_solver(impl="gpu_agent:Solver"), ROWS)
    _assert_one_line(
        _run(job),
        job,
        "servers.solver.impl",
        f"{job.root / 'gpu_agent.py'}:7",
        "RuntimeError: no GPU here",
    )


def test_an_sdk_agent_without_the_openai_package(job: Job, no_leftover_servers: None) -> None:
    """Before: healthy, every rollout retried three times as http_5xx, exit status 0."""
    hide = job.root / "hide-openai"
    hide.mkdir(parents=True)
    (hide / "sitecustomize.py").write_text(HIDE_OPENAI, encoding="utf-8")
    job.write(_solver(impl="sdk_agents:StreamingToolAgent", environment="arith"), ROWS)
    env = job.env()
    env["PYTHONPATH"] = str(hide) + os.pathsep + env["PYTHONPATH"]
    result = _run(job, env)
    _assert_one_line(
        result,
        job,
        "servers.solver.impl",
        "sdk_agents:StreamingToolAgent uses the OpenAI SDK",
        "'openai' package is not installed",
    )
    log = (job.out / "logs" / "solver.log").read_text(encoding="utf-8")
    assert "cannot start" in log and "Traceback" not in log


def test_an_api_key_variable_that_is_not_set(job: Job, no_leftover_servers: None) -> None:
    upstream = {
        "kind": "model",
        "impl": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model_name": "upstream-model",
        "api_key_env": "ROLLGYM_TEST_UNSET_KEY",
    }
    job.write(quickstart_servers(model=upstream, walker=None, keys=None), ROWS)
    env = job.env()
    env.pop("ROLLGYM_TEST_UNSET_KEY", None)
    result = _run(job, env)
    _assert_one_line(
        result,
        job,
        "servers.policy.api_key_env",
        "environment variable 'ROLLGYM_TEST_UNSET_KEY' is not set or empty",
    )
    env["ROLLGYM_TEST_UNSET_KEY"] = ""  # set but empty: the same
    again = _run(job, env, f"run.output_dir={job.root / 'again'}")
    _assert_one_line(again, job, "servers.policy.api_key_env")
