"""What ``rollgym run`` and ``rollgym serve``, the two commands that take a job config, share:
their parser's ``CONFIG`` argument, their exit statuses, and the one line each error ends in,
written once so the two commands read and fail alike (a config error is exit 2, any other
rollgym error exit 1, an interrupted run 130: docs/errors.md)."""

from __future__ import annotations

import argparse
import sys

from rollgym.printable import printable

EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130


def add_job_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help: str,  # noqa: A002 - argparse's own keyword
    description: str,
    example: str,
) -> argparse.ArgumentParser:
    """The subcommand ``name``, its first argument the job config file."""
    parser = subparsers.add_parser(
        name, help=help, description=description, epilog=f"example: {example}"
    )
    parser.add_argument(
        "config", metavar="CONFIG", help="job config file (YAML): run:, servers:, telemetry:"
    )
    return parser


def config_error(exc: Exception) -> int:
    """Say a config error in one line on stderr; the status to exit with."""
    print(f"rollgym: config error: {printable(exc)}", file=sys.stderr)
    return EXIT_CONFIG


def rollgym_error(exc: Exception) -> int:
    """Say any other rollgym error in one line on stderr; the status to exit with."""
    print(f"rollgym: error: {printable(exc)}", file=sys.stderr)
    return EXIT_ERROR
