"""Count `Any` per 1,000 lines of src/: how loose the typed seams still are.

Counts every use of the name `Any` (a bare `Any` imported from typing, or `typing.Any` /
`t.Any`), in annotations and anywhere else an expression names it (casts, aliases, generic
arguments), parsed with `ast` so comments, strings and the import lines themselves do not
count; string annotations (`"dict[str, Any]"`) are parsed and counted too. Lines are physical
lines of the .py files. Prints the figure for src/ as a whole, per package, and the worst files.

    python scripts/count_any.py            # src/ of this checkout
    python scripts/count_any.py --top 30   # more of the worst files
    python scripts/count_any.py --max 12   # exit 1 when src/ is above 12 per 1,000 lines
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple


class FileCount(NamedTuple):
    """One file's `Any` uses and its physical line count."""

    path: Path
    anys: int
    lines: int


def _string_annotation_anys(node: ast.Constant) -> int:
    """`Any` uses inside a string annotation; 0 when the string is not an expression."""
    try:
        parsed = ast.parse(str(node.value), mode="eval")
    except SyntaxError:
        return 0
    return sum(_is_any(n) for n in ast.walk(parsed))


def _is_any(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return (
            node.attr == "Any"
            and isinstance(node.value, ast.Name)
            and node.value.id in {"typing", "t"}
        )
    return False


def _annotation_nodes(tree: ast.AST) -> list[ast.expr]:
    """Every annotation expression in the tree (arguments, returns, variables)."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None and arg.annotation is not None:
                    found.append(arg.annotation)
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


def count_file(path: Path) -> FileCount:
    """Count one file's `Any` uses (import lines excluded)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    anys = sum(_is_any(n) for n in ast.walk(tree))
    for annotation in _annotation_nodes(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                anys += _string_annotation_anys(node)
    return FileCount(path, anys, len(text.splitlines()))


def _package_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def _per_k(anys: int, lines: int) -> float:
    return 1000.0 * anys / lines if lines else 0.0


def main(argv: list[str] | None = None) -> int:
    """Print the figures; exit 1 when --max is given and src/ is above it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "src", nargs="?", default=str(Path(__file__).resolve().parent.parent / "src")
    )
    parser.add_argument("--top", type=int, default=15, help="how many of the worst files to print")
    parser.add_argument(
        "--max", type=float, default=None, help="fail above this many per 1,000 lines"
    )
    options = parser.parse_args(argv)
    root = Path(options.src)
    if not root.is_dir():
        print(f"count_any: {root} is not a directory", file=sys.stderr)
        return 2
    counts = [count_file(p) for p in sorted(root.rglob("*.py"))]
    total_anys = sum(c.anys for c in counts)
    total_lines = sum(c.lines for c in counts)
    figure = _per_k(total_anys, total_lines)
    print(f"src: {total_anys} Any in {total_lines} lines = {figure:.1f} per 1,000 lines")
    packages: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in counts:
        entry = packages[_package_of(c.path, root)]
        entry[0] += c.anys
        entry[1] += c.lines
    print("\nper package:")
    for name, (anys, lines) in sorted(packages.items(), key=lambda kv: -_per_k(*kv[1])):
        print(f"  {name:32} {anys:5} / {lines:6} lines = {_per_k(anys, lines):5.1f}")
    print(f"\nworst files (by count):")
    for c in sorted(counts, key=lambda c: -c.anys)[: options.top]:
        if c.anys:
            print(
                f"  {str(c.path.relative_to(root)):48} {c.anys:4} ({_per_k(c.anys, c.lines):.1f} per 1,000)"
            )
    if options.max is not None and figure > options.max:
        print(f"\ncount_any: {figure:.1f} per 1,000 lines is above {options.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
