"""errors.py is the complete error tree: every RollgymError is defined there and drawn there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rollgym.errors as errors

SRC = Path(errors.__file__).parent


def _tree_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.RollgymError)
    }


def test_the_docstring_draws_every_error_under_its_parent() -> None:
    drawn = re.findall(r"^ {4}[│ ]*(?:[├└]── )?([A-Z]\w+)", errors.__doc__ or "", re.MULTILINE)
    assert sorted(drawn) == sorted(_tree_classes())
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^( {4}[│ ]*)[├└]── ([A-Z]\w+)", line)
        if match:  # the indent says the depth: one level per 4 characters
            depth = (len(match.group(1)) - 4) // 4 + 1
            cls = _tree_classes()[match.group(2)]
            assert len(cls.__mro__) - len(errors.RollgymError.__mro__) == depth, cls


def test_no_module_defines_a_rollgym_error_of_its_own() -> None:
    """A subclass of a tree error outside errors.py would be missing from the drawn tree."""
    tree = set(_tree_classes())
    strays = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if bases & tree:
                    strays.append(f"{path.relative_to(SRC)}: {node.name}")
    assert strays == []


def test_transport_errors_name_their_server_and_are_not_dispatch_errors() -> None:
    refused = errors.ConnectionRefused("cannot reach 'env'", server="env")
    assert isinstance(refused, errors.ConnectError) and isinstance(refused, errors.TransportError)
    assert refused.server == "env"
    assert not isinstance(refused, errors.DispatchError)
