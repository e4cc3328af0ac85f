"""The ``code`` environment: write a Python function, checked by hidden unit tests.

A row names a shipped problem, ``{"problem": "run_length"}`` (``tasksets/code.json``: 50+
problems), or carries one inline, ``{"inline": {"id", "prompt", "public_tests",
"hidden_tests"}}``; a test is a Python expression that must be ``True``. The model gets two
tools, ``run_code`` (run a program with optional stdin) and ``run_public_tests`` (run the
problem's public tests against a solution), and answers with its solution in a ```python
block. Verification runs the hidden tests in the rollout's sandbox; the reward is the passing
fraction (``reward: fraction``) or 1.0 only when all pass (``reward: all``). Whatever the code
does (loop forever, allocate without bound, fork, read outside its sandbox, open a socket) is
contained by the sandbox and shows up as failed tests, never as a server error.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import orjson
from pydantic import Field

from rollgym.builtins.envs._code_runner import RUNNER
from rollgym.builtins.envs.sandboxed import (
    SandboxedEnv,
    SandboxedOptions,
    shown,
    task_from_row,
)
from rollgym.sandbox import ExecResult, Sandbox
from rollgym.servers import ServerOptions, SessionState, Verdict, tool

SYSTEM_PROMPT = (
    "You are a Python programmer. Solve the problem with a Python function. Tools: run_code "
    "runs a program (with optional stdin); run_public_tests runs the public tests against "
    "your solution. Reply with your final solution in one ```python code block."
)
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def solution_of(answer: str | None) -> str | None:
    """The code of an answer: its last fenced block, else the whole text when it has a def."""
    if not answer:
        return None
    blocks = _CODE_BLOCK.findall(answer)
    if blocks:
        return str(blocks[-1])
    return answer if "def " in answer else None


def check_problem(task: dict[str, Any]) -> dict[str, Any]:
    """Validate a problem (ValueError names the field)."""
    for key in ("id", "prompt"):
        if not isinstance(task.get(key), str):
            raise ValueError(f"a code problem needs {key!r}, a string")
    for key in ("public_tests", "hidden_tests"):
        tests = task.get(key)
        if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"a code problem needs {key!r}, a list of expressions")
    if not task["hidden_tests"]:
        raise ValueError("a code problem needs at least one hidden test")
    return task


class RunnerReport:
    """The runner's verdicts: how many of ``total`` tests passed, and the first failures."""

    def __init__(self, result: ExecResult, nonce: str, total: int) -> None:
        self.total = total
        self.passed = 0
        self.failures: list[str] = []
        self.load_failed = False
        for line in result.stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word != nonce:
                continue
            verdict, _, detail = rest.partition(" ")
            if verdict == "PASS":
                self.passed += 1
            elif verdict == "FAIL":
                self.failures.append(detail)
            elif verdict == "LOADFAIL":
                self.load_failed = True
        self.result = result

    def summary(self, tests: list[str]) -> str:
        lines = [f"passed {self.passed}/{self.total} tests ({self.result.describe()})"]
        if self.load_failed:
            lines.append("the solution failed to load")
        for detail in self.failures[:5]:
            index, _, reason = detail.partition(" ")
            test = tests[int(index)] if index.isdigit() and int(index) < len(tests) else index
            lines.append(f"FAILED: {test} ({reason})")
        if self.result.stderr:
            lines.append("stderr:\n" + self.result.stderr[-1000:])
        return "\n".join(lines)


async def run_tests(sandbox: Sandbox, code: str, tests: list[str]) -> RunnerReport:
    """Run ``tests`` against ``code`` in ``sandbox``: one exec of the runner."""
    nonce = secrets.token_hex(8)
    spec = orjson.dumps({"nonce": nonce, "tests": tests})
    result = await sandbox.exec(
        ["python3", "_runner.py"],
        stdin=spec,
        files={"_runner.py": RUNNER, "solution.py": code},
    )
    return RunnerReport(result, nonce, len(tests))


class CodeOptions(SandboxedOptions):
    reward: Literal["fraction", "all"] = Field(
        "fraction", description="fraction: share of hidden tests passed; all: 1.0 or 0.0."
    )


class CodeEnv(SandboxedEnv):
    """Write a function; hidden tests decide."""

    Options: ClassVar[type[ServerOptions]] = CodeOptions
    options: CodeOptions

    async def seed(self, task: Mapping[str, object]) -> SessionState:
        problem = check_problem(task_from_row(task, "code", "problem"))
        prompt = (
            f"Problem {problem['id']}:\n{problem['prompt']}\n\nPublic tests (each must be "
            f"True):\n" + "\n".join(problem["public_tests"])
        )
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        data: dict[str, object] = {"problem": problem}
        await self.new_sandbox(data)
        return SessionState(messages=messages, data=data)

    @tool
    async def run_code(self, state: SessionState, code: str, stdin: str = "") -> str:
        """Run a Python program in your sandbox; returns its exit status, stdout and stderr."""
        sandbox: Sandbox = state.data["sandbox"]
        result = await sandbox.exec(["python3", "main.py"], stdin=stdin, files={"main.py": code})
        return shown(result)

    @tool
    async def run_public_tests(self, state: SessionState, code: str) -> str:
        """Run the problem's public tests against a solution; returns which passed."""
        tests: list[str] = state.data["problem"]["public_tests"]
        report = await run_tests(state.data["sandbox"], code, tests)
        return report.summary(tests)

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        try:
            return await self._hidden(state, answer)
        finally:
            await self.release(state)

    async def _hidden(self, state: SessionState, answer: str | None) -> Verdict:
        problem = state.data["problem"]
        tests: list[str] = problem["hidden_tests"]
        code = solution_of(answer)
        if code is None:
            return Verdict(0.0, {"problem": problem["id"], "error": "no code in the answer"})
        report = await run_tests(state.data["sandbox"], code, tests)
        fraction = report.passed / report.total
        reward = fraction if self.options.reward == "fraction" else float(fraction == 1.0)
        details = {
            "problem": problem["id"],
            "passed": report.passed,
            "total": report.total,
            "exit_code": report.result.exit_code,
            "limit": report.result.limit,
            "killed": report.result.killed,
        }
        return Verdict(reward, details)
