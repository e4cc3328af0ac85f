"""``rollgym compare RUN_A RUN_B [RUN ...] [--over version|step]``: options -> the driver's
comparison (:mod:`rollgym.reading.compare` for two runs, :mod:`rollgym.reading.run_series` for
more, and for reward over policy version or step)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rollgym.cli.arg_types import at_least
from rollgym.cli.console import stdout_console


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``compare`` to the ``rollgym`` parser."""
    compare = subparsers.add_parser(
        "compare",
        help="runs side by side: what differs in their configs, mean reward and pass@k, "
        "differences from the first with a bootstrap interval; --over: over version or step",
    )
    compare.add_argument(
        "runs",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="run output folders: the first is the baseline (two or more; one with --over)",
    )
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument(
        "--over",
        choices=["version", "step"],
        help="mean reward and pass@k at each policy version (the rollouts' first model "
        "call's) or at each run's run.step (else its place in the order given)",
    )
    compare.add_argument(
        "--tasks",
        type=at_least(0),
        default=10,
        help="two runs: how many tasks to list, flagged and largest differences first (default 10)",
    )
    compare.add_argument(
        "--resamples", type=at_least(1), default=1000, help="bootstrap resamples (default 1000)"
    )
    compare.add_argument(
        "--confidence", type=float, default=0.95, help="interval confidence (default 0.95)"
    )
    compare.add_argument("--seed", type=int, default=0, help="resampling seed (default 0)")
    compare.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    import orjson

    from rollgym.reading.compare import BootstrapSettings, CompareError, compare_runs
    from rollgym.reading.run_series import compare_many, runs_over

    runs: list[Path] = args.runs
    if len(runs) < 2 and args.over is None:
        print(
            "rollgym compare: give two or more runs (or one with --over version|step)",
            file=sys.stderr,
        )
        return 2
    settings = BootstrapSettings(args.resamples, args.confidence, args.seed)
    try:
        if args.over is not None:
            result = runs_over(runs, args.over)
        elif len(runs) == 2:
            result = compare_runs(runs[0], runs[1], settings)
        else:
            result = compare_many(runs, settings)
    except CompareError as exc:
        print(f"rollgym compare: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a run's file that cannot be read (a folder in its place)
        print(f"rollgym compare: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    from rollgym.reading import compare_report

    console = stdout_console()
    if args.over is not None:
        compare_report.print_series(result, console)
    elif len(runs) == 2:
        compare_report.print_comparison(result, max_tasks=args.tasks, console=console)
    else:
        compare_report.print_many(result, console)
    return 0
