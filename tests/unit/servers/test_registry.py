"""resolve_impl: built-in names, module:Class, and clear errors."""

from __future__ import annotations

import pytest

from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers.registry import BUILTINS, resolve_impl


def test_every_builtin_resolves_to_a_server_of_its_kind():
    for name, (kind, _) in BUILTINS.items():
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
