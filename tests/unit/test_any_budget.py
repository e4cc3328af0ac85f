"""How loose the typed seams may be: at most 12 `Any` per 1,000 lines of src/.

`scripts/count_any.py` counts every use of the name (annotations, casts, aliases, string
annotations); JSON has real types in `rollgym.json_types`, the store's rows in
`reading/query_rows.py`, so new code has a typed home for what it passes around.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _counter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("count_any", ROOT / "scripts" / "count_any.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_src_stays_within_twelve_any_per_thousand_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _counter().main([str(ROOT / "src"), "--max", "12"]) == 0, capsys.readouterr().err


def test_the_counter_sees_an_any_in_every_place_it_claims(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from typing import Any\nimport typing\n"
        "x: Any = 1\n"
        "def f(a: 'dict[str, Any]') -> typing.Any: ...\n"
        "# Any in a comment\n"
        "s = 'Any in a string'\n",
        encoding="utf-8",
    )
    counted = _counter().count_file(tmp_path / "m.py")
    assert counted.anys == 3 and counted.lines == 6
