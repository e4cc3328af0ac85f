"""``rollgym``: the command. Each subcommand lives in its own module with a ``register`` function."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rollgym.cli.job_command import EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    from rollgym.cli import compare as compare_command
    from rollgym.cli import export as export_command
    from rollgym.cli import run as run_command
    from rollgym.cli import serve as serve_command
    from rollgym.cli import traces as traces_command

    parser = argparse.ArgumentParser(
        prog="rollgym",
        description="Collect LLM-agent rollouts on environments at high concurrency, "
        "with one small job trace and one bounded trace per rollout.",
    )
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND")
    subcommands.required = True
    run_command.register(subcommands)
    serve_command.register(subcommands)
    traces_command.register(subcommands)
    export_command.register(subcommands)
    compare_command.register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Ctrl-C that a command does not handle itself (``rollgym run`` and
    ``serve`` do: they stop their servers and say how to resume) ends it with one line and
    exit 130, never a traceback: reading commands (``compare``, ``traces profile``,
    ``export``) only read, so there is nothing to undo."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        code = args.handler(args)
    except KeyboardInterrupt:
        print("rollgym: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
