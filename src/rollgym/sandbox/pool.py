"""The warm pool: sandboxes prepared ahead, handed to rollouts, destroyed after each.

A rollout asks :meth:`SandboxPool.acquire` at the start of its episode and gives the sandbox
back with :meth:`SandboxPool.release` when it is verified (or its session expires). Preparing
a sandbox (its private work directory, owned by the sandbox user) happens in the background
to keep ``warm`` of them ready, so acquiring one is a pop off a deque; destroying one (its
files removed) happens after the rollout's answer is computed, off its critical path where the
caller lets it. ``max_sandboxes`` bounds how many exist at once: past it, acquirers wait
(counted as ``waiting``). Execs run on a thread pool of ``max_concurrent_execs`` workers.

The counters in :class:`PoolStats` are exact: every sandbox created is destroyed once, every
exec is counted once, and :meth:`close` destroys whatever is still out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollgym.sandbox._bwrap import Launch, check_support, sandbox_owner
from rollgym.sandbox._cgroup import create_pool_cgroup, remove_cgroup
from rollgym.sandbox._disk import SandboxDisk, can_mount, pool_dir_prefix, sweep_stale
from rollgym.sandbox._process import run_exec
from rollgym.sandbox.limits import LIMIT_DISK, LIMIT_OUTPUT, ExecResult, SandboxLimits
from rollgym.sandbox.sandbox import ExecHost, Sandbox
from rollgym.telemetry.groups import gate


@dataclass
class PoolStats:
    """Exact accounting of a pool (reported in an environment's aggregate metrics)."""

    created: int = 0
    destroyed: int = 0
    execs: int = 0
    timed_out: int = 0
    killed: int = 0
    output_limited: int = 0
    disk_limited: int = 0

    def as_json(self) -> dict[str, int]:
        return asdict(self)


class SandboxPool:
    """Sandboxes for one server process; create in ``on_startup``, :meth:`close` at shutdown."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        warm: int = 4,
        max_sandboxes: int = 256,
        max_concurrent_execs: int = 16,
        base_dir: str | os.PathLike[str] | None = None,
        metrics: Any = None,
        use_cgroups: bool = True,
        use_tmpfs: bool = True,
    ) -> None:
        if warm < 0 or max_sandboxes < 1 or warm > max_sandboxes:
            raise ValueError("need 0 <= warm <= max_sandboxes and max_sandboxes >= 1")
        self.limits = limits or SandboxLimits()
        self.warm = warm
        self.max_sandboxes = max_sandboxes
        self.executor = ThreadPoolExecutor(
            max_workers=max_concurrent_execs, thread_name_prefix="rollgym-sandbox"
        )
        self.stats = PoolStats()
        self.use_cgroups = use_cgroups
        self.use_tmpfs = use_tmpfs
        #: Whether each sandbox has its own tmpfs of ``disk_mb`` (decided at start, see
        #: ``_disk``): only where this process may mount.
        self.tmpfs_quota = False
        #: The pool's cgroup v2 directory when one could be created (see ``_cgroup``).
        self.cgroup: Path | None = None
        self._base_parent = base_dir
        self._base: Path | None = None
        self._ready: deque[Sandbox] = deque()
        self._out: set[Sandbox] = set()
        self._waiting = 0
        self._freed = asyncio.Condition()
        self._refill: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._metrics = metrics
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Check that sandboxes work here (raises ``SandboxUnavailable`` naming the fix), then
        fill the warm pool."""
        await asyncio.to_thread(check_support)
        base = tempfile.mkdtemp(prefix=pool_dir_prefix(), dir=self._base_parent)
        os.chmod(base, 0o711)  # the sandbox user must reach its own directory, list none
        self._base = Path(base)
        if self.use_tmpfs:
            self.tmpfs_quota = await asyncio.to_thread(can_mount, self._base)
            if self.tmpfs_quota:
                await asyncio.to_thread(sweep_stale, self._base.parent)
        if self.use_cgroups:
            self.cgroup = await asyncio.to_thread(self._usable_cgroup, self._base.name)
        self._metrics = _metrics_or(self._metrics, self)
        await self._fill()

    @staticmethod
    def _usable_cgroup(name: str) -> Path | None:
        """The pool's cgroup, if one can be made here and a process can enter it (a cgroup
        the server may create but not move processes into is dropped: rlimits only)."""
        path = create_pool_cgroup(name)
        if path is None:
            return None
        probe = run_exec(Launch(("true",)), None, SandboxLimits(), path, "probe")
        if probe.exit_code != 0:
            remove_cgroup(path)
            return None
        return path

    async def close(self) -> None:
        """Destroy every sandbox, ready or handed out, and remove the base directory."""
        if self._closed:
            return
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        for sandbox in [*self._ready, *self._out]:
            await self._destroy(sandbox)
        self._ready.clear()
        self._out.clear()
        if self._base is not None:
            await asyncio.to_thread(shutil.rmtree, self._base, True)
        if self.cgroup is not None:
            await asyncio.to_thread(remove_cgroup, self.cgroup)
        await asyncio.to_thread(self.executor.shutdown, True, cancel_futures=True)

    # --- what rollouts call ---------------------------------------------------------------------
    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def live(self) -> int:
        """Sandboxes that exist now (ready + handed out)."""
        return self.stats.created - self.stats.destroyed

    async def acquire(self, rollout_id: str | None = None) -> Sandbox:
        """A fresh sandbox for one rollout (``gym.sandbox.create``); waits while the pool is
        at ``max_sandboxes``."""
        if gate.sandbox:
            from rollgym.telemetry import spans

            with spans.sandbox_create_span(rollout_id) as span:
                sandbox, warm = await self._take()
                spans.record_sandbox_created(span, sandbox.sandbox_id, warm)
        else:
            sandbox, warm = await self._take()
        sandbox.rollout_id = rollout_id
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        """Destroy a rollout's sandbox (``gym.sandbox.destroy``); safe to call twice."""
        if sandbox.destroyed:
            return
        if gate.sandbox:
            from rollgym.telemetry import spans

            with spans.sandbox_destroy_span(sandbox.rollout_id, sandbox.sandbox_id):
                await self._destroy(sandbox)
        else:
            await self._destroy(sandbox)

    def release_soon(self, sandbox: Sandbox) -> None:
        """:meth:`release` from synchronous code (an expired session): scheduled, not awaited."""
        if not sandbox.destroyed and not self._closed:
            task = asyncio.get_running_loop().create_task(self.release(sandbox))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # --- internals ------------------------------------------------------------------------------
    async def _take(self) -> tuple[Sandbox, bool]:
        if self._closed or self._base is None:
            raise RuntimeError("the sandbox pool is not started or already closed")
        warm = True
        if not self._ready:
            async with self._freed:
                self._waiting += 1
                try:
                    await self._freed.wait_for(self._can_take)
                finally:
                    self._waiting -= 1
        if self._ready:
            sandbox = self._ready.popleft()
        else:  # under max_sandboxes but none ready yet: make one on the rollout's path
            sandbox, warm = await self._create(), False
        self._out.add(sandbox)
        self._schedule_fill()
        return sandbox, warm

    def _can_take(self) -> bool:
        return bool(self._ready) or self.live < self.max_sandboxes

    async def _create(self) -> Sandbox:
        assert self._base is not None
        sandbox_id = f"{os.getpid()}-{next(self._ids)}-{uuid.uuid4().hex[:6]}"
        root = self._base / sandbox_id
        quota = self.limits.disk_mb * 1024 * 1024
        self.stats.created += 1  # counted before the await, so concurrent makers see it
        try:
            disk = await asyncio.to_thread(
                SandboxDisk.create, root, quota, sandbox_owner(), self.tmpfs_quota
            )
        except BaseException:
            self.stats.created -= 1
            raise
        host = ExecHost(self.executor, self.limits, self.cgroup, self.record_exec)
        return Sandbox(host, sandbox_id, disk)

    async def _destroy(self, sandbox: Sandbox) -> None:
        if sandbox.destroyed:
            return
        sandbox.destroyed = True
        self._out.discard(sandbox)
        await asyncio.to_thread(sandbox.remove_files)
        self.stats.destroyed += 1
        async with self._freed:
            self._freed.notify_all()
        self._schedule_fill()

    def _schedule_fill(self) -> None:
        if self._closed or (self._refill is not None and not self._refill.done()):
            return
        if len(self._ready) < self.warm and self.live < self.max_sandboxes:
            self._refill = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        while not self._closed and len(self._ready) < self.warm and self.live < self.max_sandboxes:
            self._ready.append(await self._create())
            async with self._freed:
                self._freed.notify_all()

    def record_exec(self, result: ExecResult) -> None:
        stats = self.stats
        stats.execs += 1
        stats.timed_out += result.timed_out
        stats.killed += result.killed
        stats.output_limited += result.limit == LIMIT_OUTPUT
        stats.disk_limited += result.limit == LIMIT_DISK
        if self._metrics is not None:
            self._metrics.exec_finished(result.wall_s)


def _metrics_or(metrics: Any, pool: SandboxPool) -> Any:
    """The given recorder, or one on the process's meter when metrics are exported."""
    if metrics is not None:
        return metrics
    from opentelemetry import metrics as otel_metrics

    from rollgym.telemetry._state import INSTRUMENTATION_NAME
    from rollgym.telemetry.metrics import SandboxMetrics

    meter = otel_metrics.get_meter(INSTRUMENTATION_NAME)
    return SandboxMetrics(meter, ready=lambda: pool.ready, waiting=lambda: pool.waiting)
