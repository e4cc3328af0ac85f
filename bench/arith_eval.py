"""The built-in arithmetic's ``evaluate`` (the environment's expected answer and the simulated
policy's reply, once each per single-turn rollout), this checkout vs another, side by side.

Both modules are loaded into this process (the other from ``--against-src``) and evaluate the
same expressions in alternating rounds; the values must agree exactly, and the CPU per
expression of each and their ratio are printed.

    python bench/arith_eval.py --against-src <other checkout>/src [--rounds 6]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path
from types import ModuleType

MODULE = Path("rollgym/builtins/arith.py")
EXPRESSIONS = [f"{i} + 7" for i in range(2000)] + ["12 + 7 * 3", "(3 - 1.5) / 4", "-2 * 0.1"]


def _load(src: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, src / MODULE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no {MODULE} under {src}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against-src", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent / "src"
    ways = {"this": _load(here, "arith_this"), "against": _load(args.against_src, "arith_other")}
    for expression in EXPRESSIONS:
        values = {way: module.evaluate(expression) for way, module in ways.items()}
        if values["this"] != values["against"]:
            raise SystemExit(f"{expression!r}: {values}")
    spent: dict[str, list[float]] = {way: [] for way in ways}
    for i in range(args.rounds):
        for way in list(ways) if i % 2 == 0 else list(reversed(ways)):
            start = time.process_time()
            for expression in EXPRESSIONS:
                ways[way].evaluate(expression)
            spent[way].append((time.process_time() - start) / len(EXPRESSIONS))
    this, other = (statistics.median(spent[way]) * 1e6 for way in ways)
    print(
        f"evaluate: this {this:.1f} us, against {other:.1f} us an expression: {other / this:.2f}x"
    )


if __name__ == "__main__":
    main()
