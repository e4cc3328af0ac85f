"""``impl`` name -> server class: the built-ins by short name, anything else as ``module:Class``.

The config loader calls :func:`resolve_impl` for every launched server, so a typo or a class of
the wrong kind is a config error before any process starts. Built-ins are imported only when
named, so validating a config never imports FastAPI for servers that are not used.

A ``module:Class`` is imported with the working directory on ``sys.path``, whichever way
rollgym was started: ``python -m rollgym`` puts it there, the ``rollgym`` console script does
not (its ``sys.path[0]`` is the script's folder). The driver resolves every launched server's
class when it loads the config, and each server process resolves its own in the same working
directory, so ``impl: mymodule:MyEnv`` beside the config works for both.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from typing import TYPE_CHECKING

from rollgym.server_options import ServerOptions

if TYPE_CHECKING:
    from rollgym.servers.base import Server

#: Built-in implementations by kind: name -> "module:Class" (a name is unique across kinds).
BUILTINS: dict[str, dict[str, str]] = {
    "model": {
        "simulated": "rollgym.builtins.models.simulated:SimulatedModel",
        "openai": "rollgym.builtins.models.openai_upstream:OpenAIUpstream",
    },
    "environment": {
        "arithmetic": "rollgym.builtins.envs.arithmetic:ArithmeticEnv",
        "keychain": "rollgym.builtins.envs.keychain:KeychainEnv",
        "code": "rollgym.builtins.envs.code:CodeEnv",
        "terminal": "rollgym.builtins.envs.terminal:TerminalEnv",
        "openenv": "rollgym.builtins.envs.openenv:OpenEnvEnv",
        "nemo_gym": "rollgym.builtins.envs.nemo_gym:NemoGymEnv",
        "verifiers": "rollgym.builtins.envs.verifiers_env:VerifiersEnv",
        "ors": "rollgym.builtins.envs.ors:OrsEnv",
    },
    "agent": {
        "single_turn": "rollgym.builtins.agents.single_turn:SingleTurnAgent",
        "tool_loop": "rollgym.builtins.agents.tool_loop:ToolLoopAgent",
        "nemo_gym_row": "rollgym.builtins.agents.nemo_gym_row:NemoGymRowAgent",
    },
}
#: The kind of each built-in name.
_KIND_OF = {name: kind for kind, named in BUILTINS.items() for name in named}


#: The options of the built-ins that keep them in a module apart from the server (impl ->
#: "module:Class"): the driver validates such a server's options without importing its class,
#: so reading the quickstart's config imports neither FastAPI nor aiohttp. A built-in not
#: listed here (and every ``module:Class``) has its class imported for its ``Options``.
BUILTIN_OPTIONS: dict[str, str] = {
    "simulated": "rollgym.builtins.models.options:SimulatedOptions",
    "arithmetic": "rollgym.builtins.envs.options:ArithmeticOptions",
    "keychain": "rollgym.builtins.envs.options:KeychainOptions",
    "single_turn": "rollgym.builtins.agents.options:SingleTurnOptions",
    "tool_loop": "rollgym.builtins.agents.options:ToolLoopOptions",
}


def resolve_impl(impl: str, kind: str) -> type[Server]:
    """The server class named by ``impl``, checked to be a server of ``kind``.

    Raises ``ValueError`` (unknown built-in, malformed name), ``ImportError`` (module not
    found, or it raised at import: one line naming its file and line), ``AttributeError``
    (no such class) or ``TypeError`` (not a server of that kind).
    """
    return _check_kind(impl, _import_named(impl, _target(impl, kind)), kind)


def resolve_options(impl: str, kind: str) -> type[ServerOptions]:
    """The ``Options`` model of the server ``impl`` names: for a built-in in
    :data:`BUILTIN_OPTIONS` without importing its class; else ``resolve_impl(...).Options``.
    Raises what :func:`resolve_impl` raises."""
    named = BUILTIN_OPTIONS.get(impl)
    if named is None:
        return resolve_impl(impl, kind).Options
    _target(impl, kind)  # an unknown name or a wrong kind, as resolve_impl says it
    options = _import_named(impl, named)
    if not isinstance(options, type) or not issubclass(options, ServerOptions):
        raise TypeError(f"the options of {impl!r} ({named}) are not a ServerOptions model")
    return options


def _target(impl: str, kind: str) -> str:
    """The ``module:Class`` ``impl`` names, checked against the built-ins' kinds."""
    builtin_kind = _KIND_OF.get(impl)
    if builtin_kind is not None:
        if builtin_kind != kind:
            raise TypeError(f"built-in {impl!r} is a {builtin_kind} implementation, not a {kind}")
        return BUILTINS[kind][impl]
    if ":" in impl:
        module_name, _, class_name = impl.partition(":")
        if not module_name or not class_name:
            raise ValueError(f"implementation {impl!r} must look like 'package.module:Class'")
        return impl
    known = ", ".join(BUILTINS.get(kind, {}))
    raise ValueError(
        f"unknown implementation {impl!r}; built-in {kind}s: {known}; or give 'package.module:Class'"
    )


def _import_named(impl: str, target: str) -> object:
    """The object ``target`` (``module:Name``) names; errors name ``impl``."""
    module_name, _, class_name = target.partition(":")
    if impl not in _KIND_OF:
        _working_directory_importable()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"cannot import module {module_name!r} of implementation {impl!r}: {exc}"
        ) from None
    except SyntaxError as exc:  # the author's file, by name and line: one line, no traceback
        raise ImportError(
            f"module {module_name!r} of implementation {impl!r} has a syntax error: "
            f"{exc.filename}:{exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:  # the module's own code raised: where, and what, in one line
        raise ImportError(
            f"module {module_name!r} of implementation {impl!r} raised at import "
            f"({_raised_where(exc, module_name)}): {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from None
    found = getattr(module, class_name, None)
    if found is None:
        raise AttributeError(f"module {module_name!r} has no class {class_name!r}")
    return found


def _raised_where(exc: BaseException, module_name: str) -> str:
    """``file:line`` of the raise: the last line of the module's own file on the way (the
    author's line, even where a library it called raised), else the innermost line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # its package raised too: the innermost line is all there is
        spec = None
    own = [f for f in frames if spec is not None and f.filename == spec.origin]
    where = (own or frames)[-1:]
    return f"{where[0].filename}:{where[0].lineno}" if where else "no line known"


def _working_directory_importable() -> None:
    """Put the working directory first on ``sys.path`` (as ``python -m`` does) when it is
    not there already, in either spelling (``''`` means the working directory)."""
    cwd = os.getcwd()
    if "" in sys.path or cwd in sys.path:
        return
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()


def _check_kind(impl: str, cls: object, kind: str) -> type[Server]:
    from rollgym.servers.base import Server

    if not isinstance(cls, type) or not issubclass(cls, Server):
        raise TypeError(
            f"{impl!r} is not a rollgym server class (subclass Agent, Environment or ModelServer)"
        )
    if getattr(cls, "kind", None) != kind:
        raise TypeError(
            f"{impl!r} is a {getattr(cls, 'kind', 'server of no kind')} server, not a {kind}"
        )
    return cls
