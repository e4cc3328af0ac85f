"""A verifiers environment loaded from the ``module`` or ``module:object`` a config names.

What the config's ``verifiers_environment`` may name, as verifiers' own ``vf.load_environment`` and
the Environments Hub write environments:

- ``module``: a module exposing ``load_environment(**args)`` (every Hub environment);
- ``module:object``: a ``vf.Environment`` instance, or a callable (``load_environment``, a
  class, a factory) that returns one when called with ``verifiers_args``.

Everything that can go wrong here (the package or the module is missing, the object is not
there or not an environment, it raises while loading) is a :class:`SetupProblem`: one line,
and the run ends before its first rollout.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from rollgym.servers import SetupProblem

#: The config key naming the environment (what a SetupProblem blames).
ENV_KEY = "verifiers_environment"
#: The function a module-only target must expose (verifiers' own convention).
LOADER = "load_environment"


def verifiers_package() -> Any:
    """``import verifiers`` (its classic API), or a SetupProblem saying how to install it."""
    try:
        import verifiers
    except ImportError:
        raise SetupProblem(
            "impl",
            "the 'verifiers' package is not installed: pip install 'rollgym[verifiers]'",
        ) from None
    if not hasattr(verifiers, "Environment"):
        version = getattr(verifiers, "__version__", "?")
        raise SetupProblem(
            "impl",
            f"verifiers {version} has no classic Environment API (vf.Environment, "
            "SingleTurnEnv, ToolEnv); install verifiers 0.3: pip install 'rollgym[verifiers]'",
        )
    return verifiers


def load_environment(target: str, args: Mapping[str, object]) -> Any:
    """The ``vf.Environment`` ``target`` names, built with ``args``."""
    vf = verifiers_package()
    module_name, _, name = target.partition(":")
    if not module_name:
        raise SetupProblem(ENV_KEY, f"{target!r} must look like 'module' or 'module:object'")
    module = _import(module_name)
    attribute = name or LOADER
    found = getattr(module, attribute, None)
    if found is None:
        what = "exposes no load_environment()" if not name else f"has no {name!r}"
        raise SetupProblem(ENV_KEY, f"module {module_name!r} {what}")
    if isinstance(found, vf.Environment):
        if args:
            raise SetupProblem(
                "verifiers_args",
                f"{target!r} is an environment already built; 'verifiers_args' needs a "
                "function that builds one",
            )
        return found
    if not callable(found):
        raise SetupProblem(
            ENV_KEY, f"{target!r} is a {type(found).__name__}, not a verifiers Environment"
        )
    try:
        built = found(**args)
    except Exception as exc:  # the user's code: what it raised, in one line
        raise SetupProblem(
            ENV_KEY, f"{target!r} raised while loading: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    if not isinstance(built, vf.Environment):
        raise SetupProblem(
            ENV_KEY,
            f"{target!r} returned a {type(built).__name__}, not a verifiers Environment",
        )
    if not built.env_id:
        built.env_id = module_name
    return built


def _import(module_name: str) -> Any:
    """The module, imported with the working directory importable (as ``vf-eval`` does)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
        importlib.invalidate_caches()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise SetupProblem(ENV_KEY, f"no module named {module_name!r}") from None
        raise SetupProblem(
            ENV_KEY, f"cannot import {module_name!r}: ModuleNotFoundError: {one_line(exc)}"
        ) from None
    except Exception as exc:
        raise SetupProblem(
            ENV_KEY, f"cannot import {module_name!r}: {type(exc).__name__}: {one_line(exc)}"
        ) from None


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, bounded."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."
