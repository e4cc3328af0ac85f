"""``python -m rollgym.tracestore serve ...``: how store_process.py starts the store as a child.

An entry point, so it may wire a higher layer in: the viewer of a run's store shows the run's
own files (conversations, failures, a comparison) through the driver's views, exactly as
``rollgym traces serve`` does.
"""

from __future__ import annotations

import argparse
import sys

from rollgym.driver.run_views import run_routes
from rollgym.tracestore.serve_command import add_serve_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rollgym.tracestore")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands, run_routes=run_routes)
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
