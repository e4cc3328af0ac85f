"""resolve_impl: built-in names, module:Class, and clear errors; each built-in's options
typed as its own ``Options`` and checked at construction."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest
from pydantic import ValidationError

from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.options import ArithmeticOptions, KeychainOptions
from rollgym.builtins.models.options import SimulatedOptions
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers.base import Server, ServerContext
from rollgym.servers.registry import BUILTIN_OPTIONS, BUILTINS, resolve_impl, resolve_options

#: Every built-in as (name, kind).
NAMED = [(name, kind) for kind, named in BUILTINS.items() for name in named]


def test_every_builtin_resolves_to_a_server_of_its_kind():
    assert len({name for name, _ in NAMED}) == len(NAMED), "a built-in name is in two kinds"
    for name, kind in NAMED:
        assert resolve_impl(name, kind).kind == kind


def test_module_class_form():
    assert (
        resolve_impl("rollgym.builtins.models.simulated:SimulatedModel", "model") is SimulatedModel
    )
    assert resolve_impl("rollgym.builtins.agents.tool_loop:ToolLoopAgent", "agent") is ToolLoopAgent


@pytest.mark.parametrize(
    ("impl", "kind", "error", "text"),
    [
        ("nonesuch", "model", ValueError, "simulated"),
        ("simulated", "agent", TypeError, "model implementation"),
        ("no_such_pkg.mod:Cls", "model", ImportError, "no_such_pkg.mod"),
        ("rollgym.builtins.models.simulated:Nope", "model", AttributeError, "Nope"),
        ("rollgym.builtins.arith:evaluate", "model", TypeError, "not a rollgym server class"),
        (
            "rollgym.builtins.models.simulated:SimulatedModel",
            "environment",
            TypeError,
            "not a environment",
        ),
        (":Cls", "model", ValueError, "package.module:Class"),
    ],
)
def test_clear_errors(impl, kind, error, text):
    with pytest.raises(error, match=text):
        resolve_impl(impl, kind)


def test_options_named_apart_are_the_classes_own_options():
    for name, kind in NAMED:
        assert resolve_options(name, kind) is resolve_impl(name, kind).Options
    assert set(BUILTIN_OPTIONS) <= {name for name, _ in NAMED}


@pytest.mark.parametrize(
    ("impl", "kind", "error"),
    [("nonesuch", "agent", ValueError), ("single_turn", "model", TypeError)],
)
def test_options_of_a_wrong_name_or_kind_fail_as_the_class_does(impl, kind, error):
    with pytest.raises(error):
        resolve_options(impl, kind)


def test_reading_the_quickstart_config_imports_no_server_stack():
    """The driver reads a config of built-ins without FastAPI, Starlette, uvicorn or aiohttp
    (each server's options come from a module apart from its class)."""
    root = Path(__file__).resolve().parents[3]
    script = (
        "import sys\n"
        "from rollgym.config import load_config\n"
        f"config = load_config({str(root / 'examples' / 'quickstart.yaml')!r})\n"
        "assert config.servers['keys'].validated_options().max_turns == 12\n"
        "heavy = ('fastapi', 'starlette', 'uvicorn', 'aiohttp')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def _builtin_classes() -> list[type[Server]]:
    return [resolve_impl(name, kind) for name, kind in NAMED]


def test_every_builtin_types_its_options_as_its_own_options():
    # `options: XOptions` beside `Options = XOptions`: self.options is typed as what it is
    for cls in _builtin_classes():
        assert get_type_hints(cls)["options"] is cls.Options, cls.__name__


def test_every_builtin_that_needs_no_options_builds_with_its_own():
    built = 0
    for name, kind in NAMED:
        cls = resolve_impl(name, kind)
        try:
            cls.Options.model_validate({})
        except ValidationError:
            continue  # required options (a model, a URL): the annotation test covers it
        assert type(cls.build(name).options) is cls.Options
        built += 1
    assert built >= 5


@pytest.mark.parametrize(("name", "kind"), NAMED)
def test_a_builtin_given_another_servers_options_refuses_them_by_name(name, kind):
    cls = resolve_impl(name, kind)
    others = [ArithmeticOptions(), KeychainOptions(), SimulatedOptions()]
    wrong = next(o for o in others if not isinstance(o, cls.Options))
    expected = cls.Options.__name__
    with pytest.raises(TypeError) as error:
        cls(ServerContext(name=f"my-{name}", options=wrong))
    message = str(error.value)
    assert "\n" not in message
    assert f"'my-{name}'" in message
    assert type(wrong).__name__ in message and expected in message
    # Server.build with an instance takes it as given, so it meets the same check
    with pytest.raises(TypeError, match=f"my-{name}"):
        cls.build(f"my-{name}", wrong)
