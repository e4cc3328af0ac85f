"""resolve_impl: built-in names, module:Class, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.models.simulated import SimulatedModel
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
