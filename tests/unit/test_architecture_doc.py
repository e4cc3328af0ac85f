"""docs/architecture.md's module tree stays true to src/rollgym: every module has its line.

A newcomer reads the tree to find where a thing lives; a module missing from it is one they
cannot find, and a file the tree names that no longer exists sends them looking for nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "rollgym"
#: Folders whose modules the tree lists by name alone (``agents/ single_turn, tool_loop``).
LISTED_BY_STEM = ("builtins/agents", "builtins/envs")


def _tree() -> str:
    """The fenced module tree at the top of the page (up to its ``## Layers`` section)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("```\nsrc/rollgym/")
    return text[start : text.index("## Layers", start)]


def _named(tree: str, word: str) -> bool:
    """``word`` stands in the tree as a whole name (``stream.py`` is not in ``upstream.py``)."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", tree) is not None


def _unlisted(tree: str, root: Path) -> list[str]:
    missing = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if path.name == "__init__.py":
            continue
        by_stem = rel.rsplit("/", 1)[0] in LISTED_BY_STEM
        if not _named(tree, path.stem if by_stem else path.name):
            missing.append(rel)
    return missing


def test_every_module_has_its_line() -> None:
    assert _unlisted(_tree(), SRC) == []


def test_every_file_the_tree_names_exists() -> None:
    known = {p.name for top in ("src", "tests", "bench") for p in (REPO / top).rglob("*.py")}
    named = set(re.findall(r"(?<![\w.])(\w+\.py)\b", _tree()))
    assert sorted(named - known) == []


def test_the_check_sees_a_missing_module(tmp_path: Path) -> None:
    """A name inside a longer one does not count: ``stream.py`` is missing here."""
    for name in ("a.py", "stream.py"):
        (tmp_path / name).write_text("")
    assert _unlisted("  a.py (one job)  openai_upstream.py", tmp_path) == ["stream.py"]
