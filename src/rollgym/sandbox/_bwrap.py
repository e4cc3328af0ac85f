"""The bubblewrap command line of a sandbox, and the start-up check that it works here.

Every exec is one ``bwrap`` process: new user, pid, network, ipc and uts namespaces (so no
network at all, loopback servers of the run included: the sandbox has its own empty loopback);
the system (``/usr``, ``/etc`` and the ``/bin``-style links) read-only; a fresh ``/dev``,
``/proc`` and ``/tmp``; the sandbox's private work directory at ``/work``; nothing else of the
host (no home, no run output directory), under a read-only root. The environment is cleared. Inside, ``prlimit`` sets
the kernel limits before the command starts, so they bind the command and all it forks, and
the process limit counts only this sandbox's user namespace.

When the server runs as root, ``bwrap`` itself runs as ``nobody`` (uid 65534): inside its user
namespace root-owned files (``/etc/shadow``, ``/root``) then belong to the overflow user and
their permission bits apply, instead of the sandbox appearing to own them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from rollgym.errors import SandboxUnavailable as SandboxUnavailable
from rollgym.sandbox.limits import SandboxLimits

#: Where the private work directory appears inside the sandbox.
WORK_DIR = "/work"
#: The environment variable naming a sandbox inside it: accounting finds its processes by it.
SANDBOX_ID_ENV = "ROLLGYM_SANDBOX_ID"
#: The same for one exec (``<sandbox id>.<n>``): the no-cgroup sweep kills stragglers by it.
EXEC_ID_ENV = "ROLLGYM_SANDBOX_EXEC"
#: The unprivileged user a root server runs sandboxes as.
NOBODY = 65534
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_INSTALL_HINT = (
    "install it with `apt-get install bubblewrap` (Debian/Ubuntu; `dnf install bubblewrap` "
    "on Fedora); `bash scripts/test.sh` does it on a fresh Debian machine"
)


def sandbox_owner() -> tuple[int, int]:
    """(uid, gid) sandboxes run as: ``nobody`` under a root server, else the server's own."""
    if os.geteuid() == 0:
        return NOBODY, NOBODY
    return os.geteuid(), os.getegid()


def user_switch() -> dict[str, object]:
    """``subprocess.Popen`` keywords that start ``bwrap`` as :func:`sandbox_uid`."""
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def system_view() -> tuple[str, ...]:
    """The read-only system: ``/usr`` and ``/etc`` bound, the merged-usr links recreated."""
    args: list[str] = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in _SYSTEM_LINKS:
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return tuple(args)


def limit_args(limits: SandboxLimits) -> tuple[str, ...]:
    """``prlimit`` options for the kernel-enforced limits (soft = hard: no raising them),
    except CPU: SIGXCPU at the limit, so its end is recognisable without CPU accounting, and
    SIGKILL a second later for a program that catches it."""
    return (
        "prlimit",
        f"--as={limits.memory_mb * 1024 * 1024}",
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_mb * 1024 * 1024}",
        "--core=0",
        "--",
    )


def exec_marker(exec_name: str) -> bytes:
    """How an exec's processes are marked in their environment."""
    return f"{EXEC_ID_ENV}={exec_name}".encode()


def bwrap_argv(
    work_dir: Path, sandbox_id: str, limits: SandboxLimits, command: list[str], exec_name: str = ""
) -> list[str]:
    """The full command line running ``command`` in the sandbox whose files are ``work_dir``."""
    return [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        *system_view(),
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--bind", str(work_dir), WORK_DIR,
        "--remount-ro", "/",
        "--chdir", WORK_DIR,
        "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "HOME", WORK_DIR,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", SANDBOX_ID_ENV, sandbox_id,
        "--setenv", EXEC_ID_ENV, exec_name or sandbox_id,
        "--",
        *limit_args(limits),
        *command,
    ]  # fmt: skip


def unavailable_reason() -> str | None:
    """Why sandboxes cannot run on this machine (what :func:`check_support` would raise), or
    None when they can: for callers that report or skip instead of failing, such as tests."""
    try:
        check_support()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


@cache
def check_support() -> str:
    """Run one tiny sandbox; raise :class:`SandboxUnavailable` naming the fix when it fails.

    Called once per process at server start (environments that sandbox call it in their
    start-up), so a missing package is a clear start-up error rather than failed rollouts.
    Returns the bwrap version line.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (`bwrap`) is not on PATH: {_INSTALL_HINT}")
    if shutil.which("prlimit") is None:
        raise SandboxUnavailable(
            "`prlimit` is not on PATH: install util-linux (`apt-get install util-linux`)"
        )
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise SandboxUnavailable(
            "`setpriv` is not on PATH: install util-linux (`apt-get install util-linux`)"
        )
    max_ns = Path("/proc/sys/user/max_user_namespaces")
    if max_ns.exists() and max_ns.read_text().strip() == "0":
        raise SandboxUnavailable(
            "user namespaces are disabled (user.max_user_namespaces = 0): enable them with "
            "`sysctl -w user.max_user_namespaces=15000`"
        )
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, check=False)
    probe = [
        "bwrap", "--unshare-all", "--die-with-parent", *system_view(),
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--",
        *limit_args(SandboxLimits()), "true",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, timeout=30, check=False, **user_switch()
        )  # type: ignore[call-overload]
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"running bubblewrap failed: {exc}") from None
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here (exit {done.returncode}: "
            f"{done.stderr.strip()[:300]}). It needs unprivileged user namespaces: enable them "
            "with `sysctl -w kernel.unprivileged_userns_clone=1` (Debian), or "
            "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu 24.04), "
            "or run the server where namespaces are allowed"
        )
    return version.stdout.strip()
