"""The start-up check: a missing tool is one clear error naming what to install."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.sandbox import SandboxPool, SandboxUnavailable, check_support
from rollgym.sandbox._bwrap import bwrap_argv
from rollgym.sandbox.limits import SandboxLimits


@pytest.fixture
def fresh_check() -> Iterator[None]:
    check_support.cache_clear()
    yield
    check_support.cache_clear()


def test_missing_bubblewrap_names_the_package(
    fresh_check: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap, no prlimit
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_support()


async def test_a_pool_refuses_to_start_without_bubblewrap(
    fresh_check: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    pool = SandboxPool(warm=1)
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        await pool.start()
    assert pool.stats.created == 0


def test_the_command_line_isolates_network_and_hides_the_host(tmp_path: Path) -> None:
    limits = SandboxLimits(memory_mb=100, cpu_s=2, processes=8)
    argv = bwrap_argv(tmp_path, "sb-1", limits, ["true"])
    assert argv[0] == "bwrap" and "--unshare-all" in argv and "--clearenv" in argv
    assert argv[argv.index("--bind") + 1 : argv.index("--bind") + 3] == [str(tmp_path), "/work"]
    assert "--remount-ro" in argv and "/root" not in argv and "/home" not in argv
    assert f"--as={100 * 1024 * 1024}" in argv and "--nproc=8" in argv and "--cpu=2:3" in argv
    assert argv[-1] == "true"
