"""What the sandboxed built-in environments share: the pool, a sandbox per session, cleanup.

Each session (one rollout) gets its own sandbox from the server's warm pool when it is seeded
and gives it back when it is verified, or when the session expires because its agent went
away, so no sandbox outlives its rollout. The pool is created at server start-up, where a
missing bubblewrap is a clear error naming what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from rollgym.builtins.envs.tasksets import load_taskset
from rollgym.sandbox import ExecResult, Sandbox, SandboxLimits, SandboxPool
from rollgym.servers import Environment, EnvironmentOptions, ServerOptions, SessionState

#: The most characters of a command's output a tool answer shows the model.
SHOWN_OUTPUT_CHARS = 2000


class SandboxedOptions(EnvironmentOptions):
    limits: SandboxLimits = Field(
        default_factory=lambda: SandboxLimits(wall_s=5.0, cpu_s=3, memory_mb=512),
        description="Limits of every command the model's code or shell runs.",
    )
    warm_sandboxes: int = Field(8, ge=0, description="Sandboxes kept ready ahead of rollouts.")
    max_sandboxes: int = Field(256, ge=1, description="Sandboxes at once; more rollouts wait.")
    max_concurrent_execs: int = Field(16, ge=1, description="Commands running at once.")


class SandboxedEnv(Environment):
    """Base of environments that give each rollout a sandbox (``state.data["sandbox"]``)."""

    Options: ClassVar[type[ServerOptions]] = SandboxedOptions
    options: SandboxedOptions
    pool: SandboxPool

    async def on_startup(self) -> None:
        options = self.options
        self.pool = SandboxPool(
            options.limits,
            warm=min(options.warm_sandboxes, options.max_sandboxes),
            max_sandboxes=options.max_sandboxes,
            max_concurrent_execs=options.max_concurrent_execs,
        )
        await self.pool.start()
        await super().on_startup()

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
        finally:
            await self.pool.close()

    async def new_sandbox(self, state_data: dict[str, Any]) -> Sandbox:
        """The seeding rollout's sandbox, kept in the session state until it is released."""
        sandbox = await self.pool.acquire(self.seeding_rollout_id())
        state_data["sandbox"] = sandbox
        return sandbox

    async def release(self, state: SessionState) -> None:
        sandbox = state.data.get("sandbox")
        if isinstance(sandbox, Sandbox):
            await self.pool.release(sandbox)

    def on_session_expired(self, state: SessionState) -> None:
        sandbox = state.data.get("sandbox")
        if isinstance(sandbox, Sandbox):
            self.pool.release_soon(sandbox)

    def aggregate_metrics(self) -> dict[str, object]:
        metrics = super().aggregate_metrics()
        metrics["sandbox"] = {**self.pool.stats.as_json(), "live": self.pool.live}
        return metrics


def shown(result: ExecResult) -> str:
    """A command's result as a tool answer: status line, then (shortened) stdout and stderr."""
    parts = [result.describe()]
    for label, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            if len(text) > SHOWN_OUTPUT_CHARS:
                text = text[:SHOWN_OUTPUT_CHARS] + f"\n... ({len(text)} characters in all)"
            parts.append(f"{label}:\n{text}")
    return "\n".join(parts)


def task_from_row(row: Mapping[str, object], taskset: str, key: str) -> dict[str, Any]:
    """The task a row names by ``row[key]`` (an id of the shipped set) or carries inline.

    ValueError names the unknown id (the environment answers 400 naming the field).
    """
    name = row.get(key)
    if isinstance(name, str):
        tasks = load_taskset(taskset)
        if name not in tasks:
            raise ValueError(
                f"{key!r}: no {taskset} task {name!r} (the shipped set has {len(tasks)})"
            )
        return tasks[name]
    inline = row.get("inline")
    if isinstance(inline, dict):
        return inline
    raise ValueError(f"a {taskset} row needs {key!r} (a task id) or 'inline' (a task object)")
