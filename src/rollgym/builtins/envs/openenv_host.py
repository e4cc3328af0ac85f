"""An OpenEnv environment served by rollgym itself, from the ``module:object`` a config names.

The object is what an OpenEnv environment's ``server/app.py`` builds (the app of
``openenv.core.env_server.create_app``, or any ASGI app serving OpenEnv's protocol), or the
environment class itself (an ``openenv`` ``Environment`` subclass whose generic parameters
name its action and observation classes), for which the app is built here. It is served on a
loopback port by uvicorn in a thread of the environment server's process, so it lives and dies
with that process, and rollgym then talks to it exactly as to a server a user runs: one
protocol, one code path, the same sessions.

Everything that can go wrong at start-up (the module does not import, the object is neither
an app nor an environment class, the app does not start) is a :class:`SetupProblem`: one line,
and the run ends before its first rollout.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import socket
import sys
import threading
import time
import typing
from typing import Any

import uvicorn

from rollgym.servers import SetupProblem

#: The config key naming the object (what a SetupProblem blames).
APP_KEY = "openenv_app"
#: How long the hosted app may take to start.
START_TIMEOUT_S = 30.0


def load_object(target: str) -> object:
    """The object ``module:name`` names, imported with the working directory importable."""
    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise SetupProblem(APP_KEY, f"{target!r} must look like 'package.module:object'")
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
        importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: what it raised, in one line
        detail = " ".join(str(exc).split())
        raise SetupProblem(
            APP_KEY, f"cannot import {module_name!r}: {type(exc).__name__}: {detail}"
        ) from None
    found = getattr(module, name, None)
    if found is None:
        raise SetupProblem(APP_KEY, f"module {module_name!r} has no {name!r}")
    return found


def app_of(target: str, found: object, max_sessions: int) -> Any:
    """The ASGI app to serve for ``found``: itself, or one built for an environment class."""
    try:
        from openenv.core.env_server.interfaces import Environment
    except ImportError:
        raise SetupProblem(
            APP_KEY, "the 'openenv-core' package is not installed: pip install 'rollgym[openenv]'"
        ) from None
    if isinstance(found, type) and issubclass(found, Environment):
        return _app_for_class(target, found, max_sessions)
    if _is_asgi_app(found):
        return found
    raise SetupProblem(
        APP_KEY,
        f"{target!r} is a {type(found).__name__}, not an OpenEnv app (create_app(...)) "
        "nor an OpenEnv Environment class",
    )


def _is_asgi_app(found: object) -> bool:
    """An ASGI app is an ``async def`` or an object whose ``__call__`` is one (FastAPI's,
    Starlette's); a plain function would be taken by uvicorn for an app factory."""
    if inspect.iscoroutinefunction(found):
        return True
    call = next((vars(k)["__call__"] for k in type(found).__mro__ if "__call__" in vars(k)), None)
    return call is not None and inspect.iscoroutinefunction(call)


def _app_for_class(target: str, env_cls: type, max_sessions: int) -> Any:
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.types import Action, Observation

    action_cls = observation_cls = None
    for base in getattr(env_cls, "__orig_bases__", ()):
        args = typing.get_args(base)
        if len(args) >= 2:
            action_cls, observation_cls = args[0], args[1]
    if not (
        isinstance(action_cls, type)
        and issubclass(action_cls, Action)
        and isinstance(observation_cls, type)
        and issubclass(observation_cls, Observation)
    ):
        raise SetupProblem(
            APP_KEY,
            f"{target!r} does not name its action and observation classes "
            "(subclass Environment[MyAction, MyObservation, State]), or give its app instead",
        )
    concurrent = getattr(env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False)
    try:
        return create_fastapi_app(
            env_cls,
            action_cls,
            observation_cls,
            max_concurrent_envs=max_sessions if concurrent else 1,
        )
    except Exception as exc:
        raise SetupProblem(
            APP_KEY, f"OpenEnv refused {target!r}: {type(exc).__name__}: {exc}"
        ) from None


class HostedApp:
    """An ASGI app served by uvicorn on ``127.0.0.1:<free port>`` in a daemon thread."""

    def __init__(self, target: str, app: Any) -> None:
        self._target = target
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", backlog=4096
        )
        self._server = uvicorn.Server(config)
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="openenv-app", daemon=True)

    def start(self) -> None:
        """Serve, and wait until the app is up; a SetupProblem when it is not."""
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                why = self._failure or "its start-up failed (see the log above)"
                raise SetupProblem(
                    APP_KEY, f"the OpenEnv app {self._target!r} did not start: {why}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def _run(self) -> None:
        # A thread of its own (uvicorn then leaves the process's signal handlers alone), with
        # an event loop of its own: the OpenEnv app never competes with rollgym's loop.
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException as exc:  # said once, by start()
            self._failure = f"{type(exc).__name__}: {exc}"
