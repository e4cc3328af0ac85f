"""Structural guards: the CLI stays light to import, and no module imports in a cycle.

Heavy machinery (the OTel SDK, FastAPI, uvicorn, the OTLP exporters) is imported only where a
command actually needs it, so ``rollgym --help`` answers at once and a disabled telemetry path
never pays for an import.
"""

from __future__ import annotations

import argparse
import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import rollgym

HEAVY = ("fastapi", "uvicorn", "opentelemetry.sdk", "opentelemetry.exporter", "rich", "aiohttp")


def _modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(rollgym.__path__, prefix="rollgym.")
        if not info.name.endswith("__main__")
    )


def test_cli_parser_imports_nothing_heavy() -> None:
    code = (
        "import sys; from rollgym.cli.main import build_parser; build_parser(); "
        f"print(sorted({{m.split('.')[0] + ('.' + m.split('.')[1] if m.startswith('opentelemetry.') else '') "
        f"for m in sys.modules if m.startswith({HEAVY!r})}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"the CLI parser imported heavy modules: {out.stdout}"


@pytest.mark.slow  # one fresh interpreter per module: minutes on a loaded machine
@pytest.mark.parametrize("module", _modules())
def test_module_imports_alone(module: str) -> None:
    """Each module imports in a fresh interpreter: a cycle would fail here."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)


def _import_graph() -> dict[str, set[str]]:
    """``{module: rollgym modules it imports}``, counting imports inside functions too (they
    run later, but a cycle through them is still a cycle) and type-only imports under ``if
    TYPE_CHECKING:`` (never run, but a type written against an upper layer is an arrow up all
    the same), and resolving a name imported from a lazy package door to the module that
    defines it. A door's own ``TYPE_CHECKING`` block, which only mirrors its ``_EXPORTS`` for
    type checkers, counts no more than the table does: importing a door loads nothing."""
    root = Path(rollgym.__file__).parent
    paths = {
        ".".join(("rollgym", *path.relative_to(root).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in root.rglob("*.py")
    }
    lazy = {module: _lazy_exports(path) for module, path in paths.items()}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        named: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _import_nodes(tree, door=bool(lazy[module])):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                named.update(f"{base}.{alias.name}" for alias in node.names)
                # a lazy door (PEP 562) loads the name's home when it is imported from it
                named.update(lazy.get(base, {}).get(alias.name, base) for alias in node.names)
                named.add(base)
        graph[module] = {
            target
            for target in (_known(name, paths) for name in named)
            if target not in ("", module)
        }
    return graph


def _lazy_exports(path: Path) -> dict[str, str]:
    """``{name: home module}`` of a package door that loads its names on first use (PEP 562):
    the ``_EXPORTS`` table of ``rollgym`` and ``rollgym.servers``. Empty for other modules."""
    if path.name != "__init__.py":
        return {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "_EXPORTS":
            table = ast.literal_eval(node.value)
            return {name: home for name, home in table.items() if home.startswith("rollgym")}
    return {}


def _import_nodes(tree: ast.AST, *, door: bool):
    """Every node of ``tree``, ``if TYPE_CHECKING:`` bodies included, except a lazy door's
    (``door``), which restate its ``_EXPORTS`` table for type checkers."""
    for child in ast.iter_child_nodes(tree):
        if door and _is_type_checking(child):
            for other in child.orelse:  # type: ignore[attr-defined]
                yield other
                yield from _import_nodes(other, door=door)
            continue
        yield child
        yield from _import_nodes(child, door=door)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(test)


def _known(name: str, modules: dict[str, Path]) -> str:
    """The rollgym module ``name`` is, or lives in ('' for a third-party one)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_imports_run_downwards() -> None:
    """No two modules import each other, even through an import inside a function."""
    assert _cycles(_import_graph()) == []


def test_the_graph_follows_lazy_doors_and_function_local_imports() -> None:
    graph = _import_graph()
    # ``from rollgym.servers import Agent`` in a built-in loads rollgym.servers.agent
    assert "rollgym.servers.agent" in graph["rollgym.builtins.agents.single_turn"]
    # importing a door itself loads nothing: no edge from the door to every home
    assert "rollgym.driver.collector" not in graph["rollgym"]
    # an import inside a function counts (the client's span helper, behind the gate)
    assert "rollgym.telemetry.spans" in graph["rollgym.http.client"]


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


#: The floors of docs/architecture.md, top to bottom: a module may import its own room (the
#: folder, or the module for a top-level one) and the rooms of lower floors, never a room on
#: its own floor or above. Every top-level module not named here is on the ground floor,
#: whose modules may import each other (never in a cycle).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("rollgym", "rollgym.__main__"),  # the package door and ``python -m rollgym``
    ("rollgym.cli", "rollgym.integrations"),  # integrations: a trainer drives a Collector
    ("rollgym.reading",),  # reading a run back: its store and its files (queries, the viewer)
    ("rollgym.driver",),
    ("rollgym.placement",),
    ("rollgym.config",),  # the job config: resolves a server's impl through servers/registry
    ("rollgym.builtins",),
    ("rollgym.servers",),
    ("rollgym.sandbox", "rollgym.trajectory", "rollgym.tracestore"),
    ("rollgym.http",),
    ("rollgym.telemetry",),
)
GROUND = len(LAYERS)


def _room(module: str) -> tuple[str, int]:
    """``(room, floor)`` of a module: the first two parts of its name, and that room's floor.

    A package's ``__main__`` is an entry point, like ``python -m rollgym``: it may wire the
    floors together, so it stands on the top floor whatever package it sits in."""
    if module.endswith(".__main__"):
        return module, 0
    room = ".".join(module.split(".")[:2])
    for floor, rooms in enumerate(LAYERS):
        if room in rooms:
            return room, floor
    return room, GROUND


def _upward(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for module, targets in graph.items():
        room, floor = _room(module)
        for target in targets:
            other, other_floor = _room(target)
            # the ground floor's modules may use each other (the cycle test still holds)
            if other != room and other_floor <= floor and floor != GROUND:
                arrows.append(f"{module} -> {target}")
    return sorted(arrows)


def test_no_import_points_up_the_layers() -> None:
    """Every import between two rooms runs down the floors of docs/architecture.md."""
    assert _upward(_import_graph()) == []


def test_every_room_is_on_a_floor() -> None:
    """A new folder must be placed on a floor (else it would silently sit on the ground)."""
    root = Path(rollgym.__file__).parent
    folders = {f"rollgym.{p.name}" for p in root.iterdir() if (p / "__init__.py").exists()}
    placed = {room for rooms in LAYERS for room in rooms}
    assert folders - placed == set()


def test_unit_tests_mirror_the_packages() -> None:
    """Every package of src/rollgym has its folder of unit tests, with a test in it."""
    root = Path(rollgym.__file__).parent
    unit = Path(__file__).resolve().parent
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    untested = [name for name in packages if not list((unit / name).glob("test_*.py"))]
    assert untested == [], f"no tests/unit/<package>/test_*.py for: {untested}"


def test_the_layer_check_sees_an_upward_import() -> None:
    graph = {
        "rollgym.http.server": {"rollgym.servers.base", "rollgym.telemetry.names"},
        "rollgym.servers.base": {"rollgym.http.server", "rollgym.servers.sdk_pool"},
        "rollgym.telemetry.settings": {"rollgym.config", "rollgym.urls"},
        "rollgym.sandbox.pool": {"rollgym.tracestore.store"},
    }
    assert _upward(graph) == [
        "rollgym.http.server -> rollgym.servers.base",
        "rollgym.sandbox.pool -> rollgym.tracestore.store",
        "rollgym.telemetry.settings -> rollgym.config",
    ]


def test_type_only_imports_count() -> None:
    """A type written against another module is an arrow, though it never runs."""
    graph = _import_graph()
    # ``if TYPE_CHECKING: from rollgym.servers.base import Server`` in config/model.py
    assert "rollgym.servers.base" in graph["rollgym.config.model"]
    # a door's TYPE_CHECKING mirror of its table loads nothing
    assert "rollgym.servers.model" not in graph["rollgym.servers"]


def _parsers(parser: argparse.ArgumentParser, path: str = "rollgym"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_cli_option_is_explained() -> None:
    """``rollgym --help`` and each subcommand's help explain every option and argument."""
    from rollgym.cli.main import build_parser

    missing = [
        f"{path}: {action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not action.help
    ]
    assert missing == []
