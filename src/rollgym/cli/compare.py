"""``rollgym compare RUN_A RUN_B``: options -> :func:`rollgym.driver.compare.compare_runs`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``compare`` to the ``rollgym`` parser."""
    compare = subparsers.add_parser(
        "compare",
        help="two runs side by side: mean reward and pass@k, B - A with a bootstrap interval",
    )
    compare.add_argument("run_a", type=Path, help="the baseline run's output folder")
    compare.add_argument("run_b", type=Path, help="the run compared with it")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument(
        "--tasks",
        type=int,
        default=10,
        help="table: how many tasks to list, flagged and largest differences first (default 10)",
    )
    compare.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)"
    )
    compare.add_argument(
        "--confidence", type=float, default=0.95, help="interval confidence (default 0.95)"
    )
    compare.add_argument("--seed", type=int, default=0, help="resampling seed (default 0)")
    compare.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    import orjson

    from rollgym.driver.compare import BootstrapSettings, CompareError, compare_runs

    settings = BootstrapSettings(args.resamples, args.confidence, args.seed)
    try:
        result = compare_runs(args.run_a, args.run_b, settings)
    except CompareError as exc:
        print(f"rollgym compare: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    from rollgym.driver.compare_report import print_comparison

    print_comparison(result, max_tasks=args.tasks)
    return 0
