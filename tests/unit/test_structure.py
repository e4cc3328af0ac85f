"""Structural guards: the CLI stays light to import, and no module imports in a cycle.

Heavy machinery (the OTel SDK, FastAPI, uvicorn, the OTLP exporters) is imported only where a
command actually needs it, so ``rollgym --help`` answers at once and a disabled telemetry path
never pays for an import.
"""

from __future__ import annotations

import argparse
import pkgutil
import subprocess
import sys

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


@pytest.mark.parametrize("module", _modules())
def test_module_imports_alone(module: str) -> None:
    """Each module imports in a fresh interpreter: a cycle would fail here."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)


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
