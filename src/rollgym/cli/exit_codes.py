"""The exit statuses of ``rollgym run`` and ``rollgym serve``, and the one line each error
ends in, written once so the two commands fail alike (docs/errors.md: a config error is
exit 2, any other rollgym error exit 1, an interrupted run 130)."""

from __future__ import annotations

import sys

EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130


def config_error(exc: Exception) -> int:
    """Say a config error in one line on stderr; the status to exit with."""
    print(f"rollgym: config error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def rollgym_error(exc: Exception) -> int:
    """Say any other rollgym error in one line on stderr; the status to exit with."""
    print(f"rollgym: error: {exc}", file=sys.stderr)
    return EXIT_ERROR
