"""The shipped task sets, checked in real sandboxes: every reference passes, every wrong
attempt fails, and the sets are as large and as varied as documented."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rollgym.builtins.envs.code import check_problem, run_tests
from rollgym.builtins.envs.tasksets import load_taskset
from rollgym.builtins.envs.terminal import check_task
from rollgym.sandbox import Sandbox, SandboxLimits, SandboxPool, unavailable_reason

needs_sandbox = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"{unavailable_reason()}"
)
LIMITS = SandboxLimits(wall_s=30, cpu_s=5)


def test_the_sets_are_large_valid_and_distinct() -> None:
    code, terminal = load_taskset("code"), load_taskset("terminal")
    assert len(code) >= 50 and len(terminal) >= 30
    for problem in code.values():
        check_problem(problem)
        assert problem["solution"] != problem["wrong"] and len(problem["hidden_tests"]) >= 3
    for task in terminal.values():
        check_task(task)
        assert task["commands"] and task["wrong"] not in task["commands"]
    assert len({p["prompt"] for p in code.values()}) == len(code)


async def _each(pool: SandboxPool, items: list[Any], play: Any) -> list[Any]:
    async def one(item: Any) -> Any:
        sandbox = await pool.acquire(item["id"])
        try:
            return await play(sandbox, item)
        finally:
            await pool.release(sandbox)

    return await asyncio.gather(*(one(item) for item in items))


@needs_sandbox
async def test_every_code_reference_passes_and_every_wrong_attempt_fails() -> None:
    async def play(sandbox: Sandbox, problem: dict[str, Any]) -> tuple[str, bool, bool]:
        tests = problem["public_tests"] + problem["hidden_tests"]
        good = await run_tests(sandbox, problem["solution"], tests)
        bad = await run_tests(sandbox, problem["wrong"], problem["hidden_tests"])
        return problem["id"], good.passed == good.total, bad.passed < bad.total

    pool = SandboxPool(LIMITS, warm=4, max_sandboxes=8)
    await pool.start()
    try:
        results = await _each(pool, list(load_taskset("code").values()), play)
    finally:
        await pool.close()
    assert [r[0] for r in results if not r[1]] == []  # references that fail
    assert [r[0] for r in results if not r[2]] == []  # wrong attempts that pass
    assert pool.stats.created == pool.stats.destroyed


@needs_sandbox
async def test_every_terminal_reference_passes_its_check_and_every_wrong_command_fails() -> None:
    async def play(sandbox: Sandbox, task: dict[str, Any]) -> tuple[str, bool]:
        sandbox.write_files(task["files"])
        for command in task["commands"]:
            await sandbox.exec(command)
        return task["id"], (await sandbox.exec(task["check"])).ok

    async def play_wrong(sandbox: Sandbox, task: dict[str, Any]) -> tuple[str, bool]:
        sandbox.write_files(task["files"])
        await sandbox.exec(task["wrong"])
        return task["id"], (await sandbox.exec(task["check"])).ok

    pool = SandboxPool(LIMITS, warm=4, max_sandboxes=8)
    await pool.start()
    tasks = list(load_taskset("terminal").values())
    try:
        good = await _each(pool, tasks, play)
        bad = await _each(pool, tasks, play_wrong)
    finally:
        await pool.close()
    assert [name for name, ok in good if not ok] == []
    assert [name for name, ok in bad if ok] == []
