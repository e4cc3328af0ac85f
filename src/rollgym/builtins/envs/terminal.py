"""The ``terminal`` environment: reach a goal state with shell commands, checked by a command.

A row names a shipped task, ``{"task": "count_errors"}`` (``tasksets/terminal.json``: 30+
tasks), or carries one inline, ``{"inline": {"id", "prompt", "files", "check"}}``. Seeding
creates the task's ``files`` in the rollout's sandbox work directory; the ``run_shell`` tool
runs one command there (``sh -c``; files persist between calls, processes do not); verify runs
the task's ``check`` command in the same sandbox state: exit status 0 is reward 1.0, anything
else 0.0. The model's final answer text is not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rollgym.builtins.envs.sandboxed import SandboxedEnv, SandboxedOptions, shown, task_from_row
from rollgym.sandbox import Sandbox
from rollgym.servers import ServerOptions, SessionState, Verdict, tool

SYSTEM_PROMPT = (
    "You are working in a Linux shell, in a directory prepared for the task. Use the "
    "run_shell tool to run commands (one per call). When the task is done, reply 'Done.'"
)


def check_task(task: dict[str, Any]) -> dict[str, Any]:
    """Validate a terminal task (ValueError names the field)."""
    for key in ("id", "prompt", "check"):
        if not isinstance(task.get(key), str):
            raise ValueError(f"a terminal task needs {key!r}, a string")
    files = task.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError("'files' of a terminal task must map paths to text contents")
    return task


class TerminalOptions(SandboxedOptions):
    pass


class TerminalEnv(SandboxedEnv):
    """Change the work directory with shell commands until the check passes."""

    Options: ClassVar[type[ServerOptions]] = TerminalOptions
    options: TerminalOptions

    async def seed(self, task: Mapping[str, object]) -> SessionState:
        spec = check_task(task_from_row(task, "terminal", "task"))
        listing = "\n".join(sorted(spec.get("files", {}))) or "(empty)"
        prompt = f"Task {spec['id']}:\n{spec['prompt']}\n\nFiles in the directory:\n{listing}"
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        data: dict[str, object] = {"task": spec}
        sandbox = await self.new_sandbox(data)
        try:
            sandbox.write_files(spec.get("files", {}))
        except ValueError:
            await self.pool.release(sandbox)
            raise
        return SessionState(messages=messages, data=data)

    @tool
    async def run_shell(self, state: SessionState, command: str) -> str:
        """Run one shell command in the task directory; returns exit status and output."""
        sandbox: Sandbox = state.data["sandbox"]
        return shown(await sandbox.exec(command))

    async def verify(self, state: SessionState, answer: str | None) -> Verdict:
        sandbox: Sandbox = state.data["sandbox"]
        try:
            result = await sandbox.exec(state.data["task"]["check"])
        finally:
            await self.release(state)
        details = {
            "task": state.data["task"]["id"],
            "check_exit_code": result.exit_code,
            "limit": result.limit,
        }
        return Verdict(1.0 if result.ok else 0.0, details)
