"""The bubblewrap command line of a sandbox, and the start-up check that it works here.

Every exec is one ``bwrap`` process: new user, pid, network, ipc and uts namespaces (so no
network at all, loopback servers of the run included: the sandbox has its own empty loopback);
the system (``/usr``, ``/etc`` and the ``/bin``-style links) read-only; a fresh ``/dev``,
``/proc`` and ``/tmp``; the sandbox's private work directory at ``/work``; nothing else of the
host (no home, no run output directory), under a read-only root; the writable directories
(``/work``, ``/tmp``, ``/dev/shm``) bounded by the disk quota (``_disk``). Inside, ``prlimit``
sets the kernel limits before the command starts, so they bind the command and all it forks,
and the process limit counts only this sandbox's user namespace.

Nothing of the server is visible from inside: ``bwrap`` is started with :data:`LAUNCH_ENV`
only (its own processes are the sandbox's PID 1, readable by the command) and reads its
options from a pipe (``--args``), so the command line a command can read there names no
host path; the command gets ``--clearenv`` plus the few variables set here; the child
inherits no file descriptor but its stdio.

When the server runs as root, ``bwrap`` itself runs as ``nobody`` (uid 65534): inside its user
namespace root-owned files (``/etc/shadow``, ``/root``) then belong to the overflow user and
their permission bits apply, instead of the sandbox appearing to own them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

from rollgym.environment_variables import ROLLGYM_SANDBOX_EXEC, ROLLGYM_SANDBOX_ID
from rollgym.errors import SandboxUnavailable as SandboxUnavailable
from rollgym.sandbox._disk import SandboxDisk
from rollgym.sandbox.limits import SandboxLimits

#: Where the private work directory appears inside the sandbox.
WORK_DIR = "/work"
SANDBOX_ID_ENV = ROLLGYM_SANDBOX_ID
EXEC_ID_ENV = ROLLGYM_SANDBOX_EXEC
#: The unprivileged user a root server runs sandboxes as.
NOBODY = 65534
#: ``PATH`` inside the sandbox, and the only variable ``bwrap`` itself starts with.
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The whole environment ``bwrap`` (and the cgroup step before it) is started with. Not the
#: server's: ``--clearenv`` clears what the command gets, but ``/proc/<pid>/environ`` of
#: ``bwrap``'s own processes (the sandbox's PID 1 among them, readable by the command, same
#: user) keeps what they were started with, API keys and ``OTEL_*`` headers included.
LAUNCH_ENV: Mapping[str, str] = MappingProxyType({"PATH": SANDBOX_PATH})
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


@cache
def program(name: str) -> str:
    """The absolute path of a host program (``bwrap``, ``sh``, ``setpriv``): it is started
    with :data:`LAUNCH_ENV`, not the server's ``PATH``."""
    return shutil.which(name) or name


@dataclass(frozen=True, slots=True)
class Launch:
    """A program, the options it reads from a pipe, and the command after them.

    ``bwrap`` reads its options from ``--args FD`` (and closes it), so the sandbox's PID 1,
    a fork of ``bwrap`` that every command can inspect, shows ``bwrap --args N -- prlimit
    ... command`` in ``/proc/1/cmdline``: no host path, no sandbox setup.
    """

    head: tuple[str, ...]
    options: tuple[str, ...] = ()
    command: tuple[str, ...] = ()

    def argv(self, options_fd: int | None) -> list[str]:
        """The command line, given the pipe the options are written to (None: none)."""
        if not self.options:
            return [*self.head, *self.command]
        if options_fd is None:
            return [*self.head, *self.options, "--", *self.command]
        return [*self.head, "--args", str(options_fd), "--", *self.command]

    def options_data(self) -> bytes:
        """The options as ``--args`` reads them: each ends with a NUL byte."""
        return b"".join(option.encode() + b"\0" for option in self.options)


def bwrap_launch(
    disk: SandboxDisk,
    sandbox_id: str,
    limits: SandboxLimits,
    command: list[str],
    exec_name: str = "",
    exec_number: int = 0,
) -> Launch:
    """How ``command`` runs in the sandbox whose writable directories are ``disk``, as its
    exec ``exec_number`` (named ``exec_name``)."""
    options = (
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        *system_view(),
        "--dev", "/dev",
        "--proc", "/proc",
        *disk.bwrap_options(exec_number),
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", WORK_DIR,
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", WORK_DIR,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", SANDBOX_ID_ENV, sandbox_id,
        "--setenv", EXEC_ID_ENV, exec_name or sandbox_id,
    )  # fmt: skip
    return Launch((program("bwrap"),), options, (*limit_args(limits), *command))


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
    usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, check=False)
    if "--size" not in usage.stdout + usage.stderr:
        raise SandboxUnavailable(
            f"{version.stdout.strip() or 'this bubblewrap'} has no `--size` option, which the "
            "sandboxes' disk quota needs: install bubblewrap 0.7.0 or newer"
        )
    probe = [
        bwrap, "--unshare-all", "--die-with-parent", *system_view(),
        "--proc", "/proc", "--dev", "/dev", "--size", "1048576", "--tmpfs", "/tmp", "--",
        *limit_args(SandboxLimits()), "true",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            probe,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=dict(LAUNCH_ENV),
            **user_switch(),
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
