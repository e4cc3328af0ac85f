"""What the tests of environments from other packages (OpenEnv, ORS, NeMo Gym) share.

Each is played the same way: the simulated model, the foreign environment ``guess`` (with its
episode ``/run``) and a ``tool_loop`` agent ``player`` on it; half the rows go to the agent,
half to the environment's own episodes. And each keeps its foreign sessions owned the same
way, so the tests that count them (from the foreign server's side) abandon rollouts, seed
sessions nobody verifies and shut an environment down mid-seed alike.
"""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from e2e_support import Job
from telemetry_helpers import TracedJob

from rollgym.servers import Environment
from rollgym.telemetry import names
from server_specs import simulated_model
from waits import until

#: The run section that sends the routed half of the rows to the environment's episodes.
RUN: dict[str, Any] = {"agent": "player", "environment_routes": {"guesses": "guess"}}


def require_python_with(python: str, statement: str, package: str) -> None:
    """Skip the module, saying why, unless ``python`` runs ``statement`` (imports
    ``package``): for a package kept in a venv of its own, which scripts/test.sh makes."""
    probe = subprocess.run([python, "-c", statement], capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(
            f"{package} is not installed for {python}: run scripts/test.sh (its venv)",
            allow_module_level=True,
        )


def servers(impl: str, latency_s: float = 0.0, **environment: object) -> dict[str, Any]:
    """The simulated model, the ``impl`` environment (with its episode ``/run``) and a
    ``tool_loop`` agent on it."""
    return {
        "policy": simulated_model(latency_s),
        "guess": {"kind": "environment", "impl": impl, "model": "policy", **environment},
        "player": {"kind": "agent", "impl": "tool_loop", "model": "policy", "environment": "guess"},
    }


def routed(task: dict[str, Any], i: int) -> dict[str, Any]:
    """``task`` as a row played by the environment's own episode (the ``guesses`` route)."""
    return {**task, "task_id": {"taskset": "guesses", "task_id": str(i)}}


def half_routed(key: str, n: int) -> list[dict[str, Any]]:
    """``n`` rows ``{key: i}``: the first half for the agent, the rest routed."""
    half = n // 2
    return [{key: i} for i in range(half)] + [routed({key: i}, i) for i in range(n - half)]


def alternately_routed(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every other task played by the environment's own episode, the rest by the agent."""
    return [routed(task, i) if i % 2 else task for i, task in enumerate(tasks)]


def assert_played(job: Job, n: int, calls: str, **expected: object) -> None:
    """``n`` rollouts, none failed, both ways played; each made one schema-valid call (the
    ``calls`` detail), its reward the one the environment gave; ``expected``: other details."""
    records = job.rollouts
    assert len(records) == n and job.summary["failed"] == 0, job.failures
    assert {r["dispatch_name"] for r in records} == {"player", "guess"}
    for record in records:
        details = record["result"]["details"]
        assert details[calls] == 1 and len(details["rewards"]) == 1, details
        assert all(details[k] == v for k, v in expected.items()), details
        assert record["reward"] == details["rewards"][0] in (0.0, 1.0)


def assert_traced(job: TracedJob, tool: str, argument: str) -> None:
    """One bounded trace per rollout: the seed, a tool span per call named by the
    environment's own ``tool``, the verification; token-captured trajectories whose tool turn
    carries ``argument``; ``rollgym traces check`` exits 0."""
    spans = job.spans()
    rollout_ids = {r["rollout_id"] for r in job.rollouts}
    for name in (names.SPAN_ENV_SEED, names.SPAN_ENV_TOOL, names.SPAN_VERIFY):
        assert {s.rollout_id for s in spans.named(name)} == rollout_ids, name
    assert {s.attributes[names.ENV_TOOL_NAME] for s in spans.named(names.SPAN_ENV_TOOL)} == {tool}
    lines = job.records("trajectories.jsonl")
    assert {t["rollout_id"] for t in lines} == rollout_ids
    for line in lines:
        turns = line["trajectory"]["turns"]
        assert [t["type"] for t in turns if t["type"] != "verify"] == ["model", "tool", "model"]
        assert turns[1]["name"] == tool and argument in turns[1]["arguments"]
        assert line["trajectory"]["capture"] == "tokens"
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr


def served_urls(proc: subprocess.Popen[str], count: int = 3) -> dict[str, str]:
    """The base URL of each server ``rollgym serve`` started, by name (its first lines)."""
    assert proc.stdout is not None
    return dict(proc.stdout.readline().split() for _ in range(count))


def _post(url: str, body: dict[str, Any], timeout: float) -> int:
    request = urllib.request.Request(
        url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        status: int = answer.status
        return status


def abandon_rollouts(
    urls: dict[str, str], tasks: list[dict[str, Any]], *, agent: bool = True
) -> None:
    """Start a rollout per task on the agent ``player`` (unless not ``agent``) and one on the
    environment's own episode ``/run`` (rollout ``e-<i>``), each caller giving up mid-rollout."""
    runs = [(urls["guess"], {"task": task, "rollout_id": f"e-{i}"}) for i, task in enumerate(tasks)]
    if agent:
        runs[:0] = [
            (urls["player"], {**task, "task_index": i, "rollout_index": 0, "attempt": 0})
            for i, task in enumerate(tasks)
        ]
    for base, body in runs:
        with pytest.raises(TimeoutError):
            _post(base + "/run", body, timeout=0.3)


def seed_unverified(environment_url: str, tasks: list[dict[str, Any]]) -> None:
    """Seed a session per task (rollout ``gone-<i>``) that nobody will verify."""
    for i, task in enumerate(tasks):
        body = {"rollout_id": f"gone-{i}", "task": task}
        assert _post(environment_url + "/seed_session", body, timeout=30) == 200


def shut_down_mid_seed(
    environment: Environment, task: dict[str, Any], seeding: Callable[[], bool]
) -> None:
    """Start ``environment`` in this process, seed one session and shut the environment down
    while the foreign server is still making it (``seeding`` says when it has begun there);
    the seed's own outcome does not matter, only what the foreign server is left holding."""

    async def play() -> None:
        await environment.on_startup()
        seed = asyncio.create_task(environment.open_session("mid-seed", task))
        try:
            await until(seeding, "the foreign server to begin the session", 60, interval=0.05)
            assert not seed.done()
        finally:
            await environment.on_shutdown()
            await asyncio.gather(seed, return_exceptions=True)

    asyncio.run(play())


def give_up_mid_seed(
    environment: Environment,
    task: dict[str, Any],
    seeding: Callable[[], bool],
    closed: Callable[[], bool],
) -> None:
    """Start ``environment`` in this process, seed one session and cancel the seed (its caller
    gave up) while the foreign server is still making it (``seeding`` says when it has begun
    there); ``closed`` must then come to hold while the environment still runs."""

    async def play() -> None:
        await environment.on_startup()
        try:
            seed = asyncio.create_task(environment.open_session("given-up", task))
            await until(seeding, "the foreign server to begin the session", 60, interval=0.05)
            assert not seed.done()
            seed.cancel()
            await asyncio.gather(seed, return_exceptions=True)
            await until(closed, "the session made to be closed", 30, interval=0.05)
        finally:
            await environment.on_shutdown()

    asyncio.run(play())


def assert_each_failed_in_one_line(
    job: Job, proc: subprocess.CompletedProcess[str], n: int, *says: str
) -> None:
    """The run ended (status 0 or 1) with its ``n`` rollouts each failed, nothing played: each
    failure one line saying all of ``says`` (the environment, the protocol step, the why)."""
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    failures = job.failures
    assert len(failures) == n and not job.rollouts, failures
    for failure in failures:
        line = failure["message"]
        assert "\n" not in line and all(part in line for part in says), line
