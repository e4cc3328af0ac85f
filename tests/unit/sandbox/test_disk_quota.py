"""The per-sandbox disk quota (``disk_mb``) in a real sandbox: a write under it works, a write
past it fails inside (ENOSPC) and the exec reports ``limit: disk_quota``; the quota holds for
``/work``, ``/tmp`` and ``/dev/shm`` together, per sandbox, and is given back when files go."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sandbox_support import LIMITS, requires_sandbox

from rollgym.sandbox import SandboxLimits, SandboxPool
from rollgym.sandbox._disk import POOL_DIR_PREFIX, SandboxDisk, can_mount, sweep_stale, unmount

pytestmark = requires_sandbox

QUOTA = LIMITS.model_copy(update={"disk_mb": 4})


def dd(path: str, mib: int) -> str:
    return f"dd if=/dev/zero of={path} bs=1M count={mib} 2>&1"


@contextlib.asynccontextmanager
async def _pool(use_tmpfs: bool) -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(QUOTA, warm=1, max_sandboxes=4, use_tmpfs=use_tmpfs)
    await pool.start()
    if use_tmpfs and not pool.tmpfs_quota:
        await pool.close()
        pytest.skip("this process may not mount a tmpfs (not root, no CAP_SYS_ADMIN)")
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(params=[True, False], ids=["tmpfs", "no-mount"])
async def quota_pool(request: pytest.FixtureRequest) -> AsyncIterator[SandboxPool]:
    """A pool with a 4 MiB quota, with a tmpfs per sandbox (where this process may mount:
    the kernel bounds every write) and without (what an unprivileged server gets)."""
    async with _pool(request.param) as pool:
        yield pool


@pytest.fixture
async def tmpfs_pool() -> AsyncIterator[SandboxPool]:
    """The same pool with its tmpfs only: for what only the kernel's bound while writing
    can hold (an unprivileged pool bounds ``/work`` after each exec)."""
    async with _pool(True) as pool:
        yield pool


async def test_a_write_under_the_quota_works_and_one_past_it_is_the_limit(
    quota_pool: SandboxPool,
) -> None:
    sandbox = await quota_pool.acquire("r-disk")
    under = await sandbox.exec(dd("small", 2))
    assert under.ok and under.limit is None
    assert (sandbox.work_dir / "small").stat().st_size == 2 << 20
    past = await sandbox.exec(dd("big", 10))
    assert past.limit == "disk_quota" and not past.timed_out
    assert "disk quota reached" in past.describe()
    if quota_pool.tmpfs_quota:  # refused while writing: at most the quota is ever held
        assert past.exit_code != 0 and "No space left on device" in past.stdout
        assert not past.killed
        assert (sandbox.work_dir / "big").stat().st_size <= (4 << 20) - (2 << 20)
    freed = await sandbox.exec("rm -f big && " + dd("again", 1))
    assert freed.ok and freed.limit is None  # deleting gives the space back
    assert quota_pool.stats.disk_limited == 1


async def test_on_a_full_sandbox_reads_are_not_the_limit_and_refused_writes_are(
    quota_pool: SandboxPool,
) -> None:
    sandbox = await quota_pool.acquire("r-full")
    filled = await sandbox.exec(dd("all", 10))
    reading = await sandbox.exec("ls -l all")
    writing = await sandbox.exec(dd("more", 1))
    assert filled.limit == "disk_quota" and reading.ok and reading.limit is None
    if quota_pool.tmpfs_quota:
        assert writing.limit == "disk_quota" and "No space left" in writing.stdout


async def test_files_of_the_server_that_no_longer_fit_are_the_limit_not_an_error(
    tmpfs_pool: SandboxPool,
) -> None:
    sandbox = await tmpfs_pool.acquire("r-nofit")
    await sandbox.exec(dd("all", 10))
    result = await sandbox.exec(["python3", "main.py"], files={"main.py": "x" * 200_000})
    assert result.limit == "disk_quota" and result.exit_code == 1
    assert "could not write main.py" in result.stderr and not result.ok


@pytest.mark.parametrize("scratch", ["/tmp", "/dev/shm"])
async def test_scratch_directories_are_bounded_too_and_emptied_per_exec(
    quota_pool: SandboxPool, scratch: str
) -> None:
    sandbox = await quota_pool.acquire("r-scratch")
    past = await sandbox.exec(dd(f"{scratch}/x", 10))
    assert past.exit_code != 0 and "No space left on device" in past.stdout
    if quota_pool.tmpfs_quota:
        assert past.limit == "disk_quota"
    later = await sandbox.exec(f"ls -A {scratch}; " + dd(f"{scratch}/y", 2))
    assert later.ok and later.limit is None and "x" not in later.stdout.split()


async def test_concurrent_execs_of_one_sandbox_have_their_own_scratch(
    quota_pool: SandboxPool,
) -> None:
    sandbox = await quota_pool.acquire("r-concurrent")
    slow = sandbox.exec("echo mine > /tmp/a && sleep 1 && cat /tmp/a && ls -A /tmp")
    fast = sandbox.exec("ls -A /tmp; echo other > /tmp/b")
    slow_result, fast_result = await asyncio.gather(slow, fast)
    assert slow_result.stdout == "mine\na\n"  # the other exec's end removed nothing of it
    assert fast_result.ok and "a" not in fast_result.stdout.split()
    assert sorted(p.name for p in sandbox.disk.root.iterdir()) == ["work"]


async def test_the_quota_is_per_sandbox_and_counts_every_writable_directory(
    tmpfs_pool: SandboxPool,
) -> None:
    first, second = await tmpfs_pool.acquire("r-a"), await tmpfs_pool.acquire("r-b")
    kept = await first.exec(dd("kept", 3))
    over = await first.exec(dd("/tmp/t", 3))  # 3 MiB kept + 3 MiB scratch > 4 MiB
    other = await second.exec(dd("own", 3))  # another sandbox has its own quota
    assert kept.ok and over.limit == "disk_quota" and other.ok and other.limit is None


async def test_a_removed_sandbox_leaves_no_mount_behind(quota_pool: SandboxPool) -> None:
    sandbox = await quota_pool.acquire("r-gone")
    await sandbox.exec(dd("f", 1))
    root = sandbox.disk.root
    await quota_pool.release(sandbox)
    assert not root.exists()
    assert str(root) not in Path("/proc/self/mountinfo").read_text()


def test_mounts_left_by_a_killed_server_are_swept_by_the_next_pool(tmp_path: Path) -> None:
    dead = tmp_path / f"{POOL_DIR_PREFIX}999999999-abc"  # no such pid
    alive = tmp_path / f"{POOL_DIR_PREFIX}{os.getpid()}-def"
    for base in (dead, alive):
        base.mkdir()
        if not can_mount(base):
            pytest.skip("this process may not mount a tmpfs")
        SandboxDisk.create(base / "1-0-x", 1 << 20, (os.geteuid(), os.getegid()), mount=True)
    try:
        assert sweep_stale(tmp_path) == 1
        mounts = Path("/proc/self/mountinfo").read_text()
        assert not dead.exists() and str(dead) not in mounts
        assert str(alive / "1-0-x") in mounts  # a live server's sandboxes are left alone
    finally:
        unmount(alive / "1-0-x")


def test_the_quota_is_an_option_with_a_bounded_default() -> None:
    assert SandboxLimits().disk_mb == 64
    with pytest.raises(ValueError, match="disk_mb"):
        SandboxLimits(disk_mb=0)
