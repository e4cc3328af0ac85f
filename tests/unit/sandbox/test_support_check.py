"""The start-up check: a missing tool is one clear error naming what to install."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.sandbox import SandboxPool, SandboxUnavailable, check_support
from rollgym.sandbox._bwrap import LAUNCH_ENV, bwrap_launch
from rollgym.sandbox._disk import SandboxDisk
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
    limits = SandboxLimits(memory_mb=100, cpu_s=2, processes=8, disk_mb=3)
    disk = SandboxDisk(tmp_path, 3 << 20, (1000, 1000), mounted=False)
    argv = bwrap_launch(disk, "sb-1", limits, ["true"]).argv(None)  # options inline
    assert Path(argv[0]).name == "bwrap" and "--unshare-all" in argv and "--clearenv" in argv
    bind = argv.index("--bind")
    assert argv[bind + 1 : bind + 3] == [str(tmp_path / "work"), "/work"]
    assert "--remount-ro" in argv and "/root" not in argv and "/home" not in argv
    assert f"--as={100 * 1024 * 1024}" in argv and "--nproc=8" in argv and "--cpu=2:3" in argv
    for scratch in ("/tmp", "/dev/shm"):  # without a tmpfs of its own: bwrap's sized ones
        at = argv.index(scratch)
        assert argv[at - 3 : at] == ["--size", str(3 << 20), "--tmpfs"]
    assert argv[-1] == "true"


def test_the_visible_command_line_names_no_host_path_and_starts_from_no_environment(
    tmp_path: Path,
) -> None:
    disk = SandboxDisk(tmp_path, 1 << 20, (1000, 1000), mounted=True)
    launch = bwrap_launch(disk, "sb-1", SandboxLimits(), ["echo", "hi"], "sb-1.3", 3)
    visible = launch.argv(7)
    assert visible[1:4] == ["--args", "7", "--"] and visible[-2:] == ["echo", "hi"]
    assert not any(str(tmp_path) in part for part in visible)
    assert str(tmp_path / "tmp.3").encode() + b"\0/tmp\0" in launch.options_data()
    assert dict(LAUNCH_ENV) == {"PATH": "/usr/local/bin:/usr/bin:/bin"}
