"""What ``rollgym run`` and ``rollgym serve``, the two commands that take a job config, share:
their parser's ``CONFIG`` argument, their exit statuses, and the one line each error ends in,
written once so the two commands read and fail alike (a config error is exit 2, any other
rollgym error exit 1, an interrupted run 130: docs/errors.md)."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import TYPE_CHECKING

from rollgym.printable import printable

if TYPE_CHECKING:
    from rollgym.config import JobConfig

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


def load_starting_early(path: str, overrides: list[str]) -> JobConfig:
    """The job config at ``path`` with ``overrides``, its local servers' fork server started
    as soon as the file is read (their imports then overlap the driver's own and the
    validation); raises :class:`~rollgym.errors.ConfigError`. The caller lets an unused fork
    server go with :func:`~rollgym.placement.forked.discard_early` whatever happens next."""
    from rollgym.config import validate_read
    from rollgym.config.data import read_config
    from rollgym.placement.forked import start_early, start_early_from

    read = read_config(path, overrides)
    start_early_from(read)
    from rollgym.errors import RenamedOptionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RenamedOptionWarning)
        config = validate_read(read)
    say_config_warnings(caught)
    start_early(config)  # where the raw config did not say enough to start it
    return config


def say_config_warnings(caught: list[warnings.WarningMessage]) -> None:
    """A renamed option as one line on stderr (not Python's two-line warning, which names
    rollgym's source); any other warning passed on as it came."""
    from rollgym.errors import RenamedOptionWarning

    for warning in caught:
        if isinstance(warning.message, RenamedOptionWarning):
            print(f"rollgym: config: {printable(warning.message)}", file=sys.stderr)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


def config_error(exc: Exception) -> int:
    """Say a config error in one line on stderr; the status to exit with."""
    print(f"rollgym: config error: {printable(exc)}", file=sys.stderr)
    return EXIT_CONFIG


def rollgym_error(exc: Exception) -> int:
    """Say any other rollgym error in one line on stderr; the status to exit with."""
    print(f"rollgym: error: {printable(exc)}", file=sys.stderr)
    return EXIT_ERROR
