"""``python -m rollgym.tracestore serve ...``: how store_process.py starts the store as a child."""

from __future__ import annotations

import argparse
import sys

from rollgym.tracestore.serve_command import add_serve_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rollgym.tracestore")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
