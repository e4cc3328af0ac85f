"""``rollgym export RUN --format parquet``: options -> :func:`rollgym.reading.export.export_parquet`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export`` to the ``rollgym`` parser."""
    export = subparsers.add_parser(
        "export", help="a run's trajectories as a training table (one row per rollout)"
    )
    export.add_argument("run_dir", type=Path, help="the run's output folder (run.output_dir)")
    export.add_argument(
        "--format", default="parquet", choices=["parquet"], help="table format (default parquet)"
    )
    export.add_argument(
        "--output",
        "-o",
        type=Path,
        help="file to write (default: RUN/trajectories.parquet)",
    )
    export.add_argument(
        "--certified-only",
        action="store_true",
        help="keep only rollouts with no violation of `rollgym traces check --data` "
        "(says how many it left out)",
    )
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from rollgym.reading.export import ExportError, export_parquet

    if not args.run_dir.is_dir():
        print(f"rollgym export: {args.run_dir}: no such run directory", file=sys.stderr)
        return 2
    try:
        exported = export_parquet(args.run_dir, args.output, certified_only=args.certified_only)
    except ExportError as exc:
        print(f"rollgym export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output file's folder is missing or not writable
        print(
            f"rollgym export: {exc.filename or args.output}: {exc.strerror or exc}", file=sys.stderr
        )
        return 2
    print(f"wrote {exported.rows} rows to {exported.path}")
    if args.certified_only:
        print(
            f"left out {exported.left_out} rollouts with violations "
            f"(rollgym traces check --data {args.run_dir} lists them)"
        )
    return 0
