"""A NeMo Gym resource server started by rollgym: a child process in the nemo-gym interpreter.

NeMo Gym's own launcher (``ng_run``) starts a resource server as ``python app.py`` in the
server's folder, with the whole resolved config in the ``NEMO_GYM_CONFIG_DICT`` environment
variable and the server's top-level key in ``NEMO_GYM_CONFIG_PATH``; the server's
``run_webserver()`` reads its host and port from there. rollgym does the same, with the
interpreter the user names (nemo-gym needs Python 3.12 or newer, rollgym's own may be older,
so it usually lives in a virtual environment of its own):

- ``resources_server: path/to/app.py`` runs that file in its folder, as ``ng_run`` does;
- ``resources_server: package.module`` runs ``python -m package.module`` (the examples nemo-gym
  ships: ``resources_servers.example_single_tool_call.app``).

The child listens on a loopback port chosen here, writes its output to a log file beside the
environment server's own, and dies with the process that started it (a parent-death signal on
Linux): the resource server, and every session it holds, never outlives its rollgym server.
:class:`ChildServer` is that child-process part alone; ORS environments served by rollgym
(:mod:`rollgym.builtins.envs.ors_host`) run in one too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson

#: What the child is told its NeMo Gym head server is: nothing listens there, and a resource
#: server started with its config injected never calls it.
_NO_HEAD_SERVER = {"host": "127.0.0.1", "port": 9}
_PR_SET_PDEATHSIG = 1


class StartFailed(Exception):
    """The resource server did not come up: one line saying why (its log's last line)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def config_dict(name: str, target: str, port: int, options: dict[str, object]) -> bytes:
    """The global config ``ng_run`` would inject for one resource server named ``name``."""
    parts = target.split(".")
    folder = Path(target).parent.name if target.endswith(".py") else parts[max(len(parts) - 2, 0)]
    entry = {"entrypoint": "app.py", **options, "host": "127.0.0.1", "port": port}
    return orjson.dumps(
        {
            "head_server": _NO_HEAD_SERVER,
            "dry_run": False,
            name: {"resources_servers": {folder or name: entry}},
        }
    )


def log_path_for(name: str, kind: str = "nemo_gym") -> Path:
    """Where the child writes: beside this process's own log (its standard output, a file in
    the run's ``logs/`` folder), else in the temporary folder."""
    with contextlib.suppress(OSError):
        own = Path(os.readlink("/proc/self/fd/1"))
        if own.is_file():
            return own.parent / f"{name}.{kind}.log"
    return Path(tempfile.gettempdir()) / f"rollgym-{name}-{os.getpid()}.{kind}.log"


def _die_with_parent() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


class ChildServer:
    """A server as a child process on a loopback port: start, wait until it answers, stop.

    Its output goes to ``log_path``; it dies with the process that started it."""

    def __init__(
        self, command: list[str], cwd: str, env: dict[str, str], port: int, log_path: Path
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    command,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent(),  # noqa: PLW1509 (prctl only, before exec)
                )
            except OSError as exc:
                raise StartFailed(f"cannot run {command[0]!r}: {exc.strerror}") from None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait_ready(self, timeout_s: float) -> None:
        """Until ``GET /health`` answers; StartFailed as soon as the child exits, or at
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise StartFailed(f"exited with status {code} before serving: {self.last_line()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):  # noqa: S310
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise StartFailed(f"did not answer GET /health within {timeout_s:g} s: {self.last_line()}")

    def last_line(self) -> str:
        """The last line of the child's log that says something (its error, usually)."""
        with contextlib.suppress(OSError):
            lines = [
                line.strip()
                for line in self.log_path.read_text(errors="replace").splitlines()
                if line.strip()
            ]
            if lines:
                return lines[-1][:300]
        return f"(no output; see {self.log_path})"

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class ResourcesProcess(ChildServer):
    """One NeMo Gym resource server as a child process, started as ``ng_run`` starts it."""

    def __init__(
        self,
        name: str,
        target: str,
        python: str,
        options: dict[str, object],
        log_path: Path,
    ) -> None:
        self.target = target
        port = free_port()
        if "/" in python or python.startswith("~"):  # a path: from here, not the app's folder
            python = str(Path(python).expanduser().absolute())
        if target.endswith(".py"):
            app = Path(target).resolve()
            if not app.is_file():
                raise StartFailed(f"no such file {str(app)!r}")
            command, cwd = [python, app.name], str(app.parent)
        else:
            command, cwd = [python, "-m", target], os.getcwd()
        env = {
            **os.environ,
            "NEMO_GYM_CONFIG_DICT": config_dict(name, target, port, options).decode(),
            "NEMO_GYM_CONFIG_PATH": name,
        }
        super().__init__(command, cwd, env, port, log_path)
