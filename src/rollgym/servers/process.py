"""One launched server process: spawn it, wait until it is healthy, stop it for sure.

Children die with the driver even when the driver is killed with SIGKILL (Linux
``PR_SET_PDEATHSIG``), run in their own session so a terminal's Ctrl-C reaches only the
driver (which then stops them in order), and write their output to ``logs/<name>.log``,
whose last lines are quoted when a server does not come up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp

from rollgym.errors import LaunchError
from rollgym.servers.spec import ENV_SPEC, ServeSpec

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05
_LOG_TAIL_LINES = 20


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGTERM when the driver dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the driver died before prctl took effect
            os._exit(1)

    return preexec


def describe_exit(returncode: int | None) -> str:
    """``exit status 3`` / ``killed by SIGKILL (exit status -9)``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name} (exit status {returncode})"
    return f"exit status {returncode}"


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return ""


async def wait_healthy(
    url: str | None,
    *,
    session: aiohttp.ClientSession,
    deadline: float,
    ready_file: Path | None = None,
    process: subprocess.Popen[bytes] | None = None,
    failure: Callable[[str], LaunchError],
    strict: bool = True,
    refused_for_s: float | None = None,
) -> str:
    """Poll until ``GET <url>/health`` answers ok; return the base URL.

    For a launched server the URL comes from its ready file; its exit first is a failure.
    ``strict=False`` (a server given by ``url:``, which may be vLLM or any OpenAI-compatible
    endpoint rather than a rollgym server) only asks that it answers HTTP below 500.
    ``refused_for_s``: fail once every connection was refused for that long (nothing listens
    there), rather than waiting for the whole deadline.
    """
    last_problem = "no answer yet"
    refused_since: float | None = None
    while True:
        if process is not None and process.poll() is not None:
            raise failure(f"exited ({describe_exit(process.returncode)}) before it was healthy")
        if url is None and ready_file is not None and ready_file.exists():
            url = f"http://127.0.0.1:{int(ready_file.read_text().strip())}"
        if url is not None:
            last_problem = await _health_problem(session, url, strict)
            if not last_problem:
                return url
            if last_problem.startswith(_REFUSED):
                refused_since = refused_since or time.monotonic()
                if refused_for_s is not None and time.monotonic() - refused_since > refused_for_s:
                    raise failure(
                        f"refusing connections for {refused_for_s:.0f} s: nothing listens there "
                        f"({last_problem})"
                    )
            else:
                refused_since = None
        if time.monotonic() > deadline:
            raise failure(f"not healthy in time ({last_problem})")
        await asyncio.sleep(_POLL_S)


_REFUSED = "connection refused"


async def _health_problem(session: aiohttp.ClientSession, url: str, strict: bool = True) -> str:
    """'' when healthy, else why not (starting with ``connection refused`` when it was)."""
    try:
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
            if not strict:
                return "" if resp.status < 500 else f"GET /health answered HTTP {resp.status}"
            if resp.status != 200:
                return f"GET /health answered HTTP {resp.status}"
            body = await resp.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"{_REFUSED}: GET {url}/health: {exc}"
        return f"GET {url}/health: {type(exc).__name__}: {exc}".rstrip(": ")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"GET {url}/health: {type(exc).__name__}: {exc}".rstrip(": ")
    if not isinstance(body, dict) or body.get("status") != "ok":
        return f"GET /health answered {body!r}"
    return ""


class ServerProcess:
    """A server started with ``python -m rollgym.servers.serve``."""

    def __init__(self, spec: ServeSpec, env: Mapping[str, str], log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.ready_file = Path(spec.ready_file)
        self.ready_file.unlink(missing_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, **env, ENV_SPEC: spec.to_env()}
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "rollgym.servers.serve"],
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent(),
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def failure(self, problem: str) -> LaunchError:
        tail = log_tail(self.log_path)
        quoted = (
            f"; last lines of {self.log_path}:\n{tail}" if tail else f"; {self.log_path} is empty"
        )
        return LaunchError(problem + quoted, server=self.spec.name)

    async def wait_healthy(self, session: aiohttp.ClientSession, timeout_s: float) -> str:
        return await wait_healthy(
            None,
            session=session,
            deadline=time.monotonic() + timeout_s,
            ready_file=self.ready_file,
            process=self.popen,
            failure=self.failure,
        )

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL. Safe to call twice."""
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.popen.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(_POLL_S)
        self.kill_now()

    def kill_now(self) -> None:
        """SIGKILL if still running, and reap: the last resort, usable without a loop."""
        if self.popen.poll() is None:
            self._signal(signal.SIGKILL)
            self.popen.wait()
        self.ready_file.unlink(missing_ok=True)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)
