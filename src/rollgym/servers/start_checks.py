"""What a server checks before it serves: its set-up, each problem said in one line.

A server whose set-up is broken should not pass its health check and then fail every rollout
(an agent on the OpenAI SDK where the package is missing answered 500 to each one, retried
three times), nor fill the console with a traceback (an ``impl:`` module that raises at
import; an API key variable that is not set). So a server process, before it binds or serves,
resolves its class and checks:

- its implementation imports (a module that raises is named with the file and line);
- every option whose name ends in ``_env`` names an environment variable that is set and not
  empty (``api_key_env``: the variable is read at start-up, never stored);
- a class that uses the OpenAI SDK (``rollout.async_openai()``, ``rollout.openai()``,
  ``import openai`` in its own source, or ``uses_openai_sdk = True``) finds it installed.

A failed check is a :class:`SetupProblem`: the server logs its one line, writes it beside its
ready file (:func:`write_problem`) and exits with :data:`EXIT_SETUP`; the launcher reads it
(:func:`read_problem`) and the run ends before its first rollout with a config error naming
``servers.<name>.<key>`` (exit status 2), with no traceback anywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rollgym.errors import ConfigError
from rollgym.files import write_atomically

if TYPE_CHECKING:
    from rollgym.server_options import ServerOptions
    from rollgym.servers.base import Server

#: The exit status of a server that found its set-up broken (the CLI's config-error status).
EXIT_SETUP = 2
#: The suffix of the file a server writes its problem to, beside its ready file.
PROBLEM_SUFFIX = ".start-problem"


class SetupProblem(Exception):
    """A server's set-up is broken: ``key`` is the config key at fault (``impl``,
    ``api_key_env``), ``message`` what is wrong, in one line."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message

    def __reduce__(self) -> tuple[type[SetupProblem], tuple[str, str]]:
        """Rebuilt whole on the other side of a pickle (a Ray actor's error reaches the driver)."""
        return SetupProblem, (self.key, self.message)

    def config_error(self, server: str) -> ConfigError:
        """The driver's error for it: ``servers.<server>.<key>: <message>``."""
        return ConfigError(self.message, key_path=f"servers.{server}.{self.key}")


def resolve_checked(impl: str, kind: str) -> type[Server]:
    """The class ``impl`` names, or a :class:`SetupProblem` saying why not (one line)."""
    from rollgym.servers.registry import resolve_impl

    try:
        return resolve_impl(impl, kind)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise SetupProblem("impl", str(exc)) from None


def check_setup(impl: str, cls: type, options: ServerOptions) -> None:
    """Raise a :class:`SetupProblem` for the first thing the server would fail on later."""
    for key, variable in named_variables(options).items():
        if not os.environ.get(variable):
            raise SetupProblem(key, f"environment variable {variable!r} is not set or empty")
    from rollgym.servers.sdk_warmup import needs_sdk

    if needs_sdk(cls) and importlib.util.find_spec("openai") is None:
        raise SetupProblem(
            "impl",
            f"{impl} uses the OpenAI SDK, and the 'openai' package is not installed: "
            "pip install 'rollgym[openai]'",
        )


def named_variables(options: ServerOptions) -> dict[str, str]:
    """``{option: variable}`` for each option ending in ``_env`` that names a variable."""
    named = {}
    for key in type(options).model_fields:
        value = getattr(options, key, None)
        if key.endswith("_env") and isinstance(value, str) and value:
            named[key] = value
    return named


def problem_path(ready_file: str | Path) -> Path:
    """Where the server behind ``ready_file`` writes its :class:`SetupProblem`."""
    return Path(str(ready_file) + PROBLEM_SUFFIX)


def write_problem(ready_file: str | Path, problem: SetupProblem) -> None:
    """Leave the problem where the launcher looks once the process has exited."""
    body = json.dumps({"key": problem.key, "message": problem.message})
    write_atomically(problem_path(ready_file), body)


def read_problem(ready_file: str | Path, server: str) -> ConfigError | None:
    """The config error of a server that exited on a :class:`SetupProblem`; None otherwise."""
    try:
        data = json.loads(problem_path(ready_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    key, message = data.get("key"), data.get("message")
    if not isinstance(key, str) or not isinstance(message, str):
        return None
    return SetupProblem(key, message).config_error(server)


def forget_problem(ready_file: str | Path) -> None:
    """Remove a problem an earlier start left (before the server starts again)."""
    problem_path(ready_file).unlink(missing_ok=True)
