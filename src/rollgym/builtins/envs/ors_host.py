"""An ORS environment served by rollgym itself: a child process in the openreward interpreter.

The config names ``module:object``: an ``openreward.environments.Environment`` subclass (served
alone, as ``Server([MyEnv])`` serves it), a list of them, or a ``Server`` the module built. The
child imports it in the interpreter that has openreward (openreward pins an older
sse-starlette than other packages of rollgym's own Python need, so it usually lives in a
virtual environment of its own, the one scripts/test.sh makes by default) and serves the
``Server``'s own app with uvicorn on a loopback port (what ``Server.run`` does, without its
update check and bound to loopback). rollgym then talks to it exactly as to a server a user
runs: one protocol, one code path.

The child writes to a log beside the environment server's own and dies with it; a module that
does not import, an object that is not an ORS environment, or an environment ``Server``
refuses (no tools, no splits, no prompt) ends it at once with one line, which is what the
run's start-up says.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollgym.builtins.envs.foreign import venv_python
from rollgym.builtins.envs.nemo_gym_host import ChildServer, StartFailed, free_port, log_path_for

#: The child's program: import the object, make its Server, serve it. It runs in openreward's
#: interpreter, so it imports nothing of rollgym; what it prints last is what a failure says.
_SERVE = """
import importlib, os, sys
target, port = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, os.getcwd())
def fail(message):
    print(message, flush=True)
    sys.exit(2)
module_name, _, name = target.partition(":")
if not module_name or not name:
    fail(f"{target!r} must look like 'package.module:object'")
try:
    from openreward.environments import Environment, Server
except ImportError as exc:
    fail(f"openreward is not installed for {sys.executable}: {exc}")
try:
    module = importlib.import_module(module_name)
except Exception as exc:
    fail(f"cannot import {module_name!r}: {type(exc).__name__}: {' '.join(str(exc).split())}")
found = getattr(module, name, None)
if found is None:
    fail(f"module {module_name!r} has no {name!r}")
def is_env(obj):
    return isinstance(obj, type) and issubclass(obj, Environment)
if isinstance(found, Server):
    server = found
elif is_env(found) or (isinstance(found, (list, tuple)) and found and all(map(is_env, found))):
    try:
        server = Server(list(found) if isinstance(found, (list, tuple)) else [found])
    except Exception as exc:
        fail(f"openreward's Server refused {target!r}: {' '.join(str(exc).split())}")
else:
    fail(f"{target!r} is a {type(found).__name__}, not an openreward Environment class "
         "(nor a list of them, nor a Server)")
import uvicorn
uvicorn.run(server.app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
            backlog=4096, timeout_keep_alive=60)
"""


def default_python() -> str:
    """openreward's own venv where scripts/test.sh made it, else ``python3``."""
    return venv_python("openreward", "python3")


class OrsProcess(ChildServer):
    """``target`` (``module:object``) served by openreward's ``Server`` in ``python``."""

    def __init__(self, name: str, target: str, python: str) -> None:
        self.target = target
        port = free_port()
        if "/" in python or python.startswith("~"):
            python = str(Path(python).expanduser().absolute())
        # openreward logs every request at INFO; its warnings and errors (a tool that raised)
        # are what the log is for, unless the user asks for more.
        env = {"OPENREWARD_LOG_LEVEL": "WARNING", **os.environ}
        super().__init__(
            [python, "-c", _SERVE, target, str(port)],
            os.getcwd(),
            env,
            port,
            log_path_for(name, "ors"),
        )


__all__ = ["OrsProcess", "StartFailed", "default_python"]
