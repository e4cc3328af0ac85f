"""``serve``: the trace store's one command, parsed here, beside the store it serves.

``rollgym traces serve`` (:mod:`rollgym.cli.traces`, also how
:mod:`rollgym.tracestore.store_process` starts the store as a child of a run) adds this parser
and hands it the viewer, so the store never imports the CLI or the read side above it. Only
``argparse`` at import: the store's machinery loads when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aiohttp import web

#: How every line ``rollgym traces serve`` says begins (a run reads the one saying its store
#: file is unusable back from the store's log:
#: :func:`~rollgym.tracestore.store_process.refusal_of`).
LINE_PREFIX = "rollgym traces serve: "


class Viewer(Protocol):
    """Given the store's file, ``--run-dir``, ``--compare`` and ``--runs``: what mounts the
    viewer on the store's app (its page and its routes over the store and the run's files:
    :func:`rollgym.reading.run_views.viewer`), handed in by whoever builds the command."""

    def __call__(
        self,
        db_path: Path,
        run_dir: Path | None,
        compare_dir: Path | None,
        runs: Sequence[Path] = (),
    ) -> Callable[[web.Application], None]: ...


def add_serve_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    viewer: Viewer | None = None,
) -> argparse.ArgumentParser:
    """``serve``; ``viewer`` mounts the viewer (without it the store takes OTLP only)."""
    serve = commands.add_parser("serve", help="OTLP/HTTP receiver + viewer on one port")
    serve.add_argument(
        "--db",
        type=Path,
        default=Path("traces.db"),
        help="SQLite file (default traces.db, or RUN_DIR/traces.db)",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; beyond loopback a bearer token is required "
        "(ROLLGYM_TRACE_STORE_TOKEN, else one is generated and printed)",
    )
    serve.add_argument("--port", type=int, default=4318, help="0 picks a free port")
    serve.add_argument("--run-dir", type=Path, help="run directory shown by the viewer")
    serve.add_argument(
        "--compare",
        type=Path,
        metavar="RUN_B",
        help="a second run directory: the viewer compares --run-dir (A) with it, as "
        "rollgym compare A RUN_B does",
    )
    serve.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="RUN",
        help="more runs for the viewer's Runs page (reward over policy version or step, "
        "config differences): run directories, or folders holding run directories",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name requests may address besides loopback and --host (repeatable); "
        "others are refused (DNS rebinding protection)",
    )
    serve.add_argument("--ready-file", type=Path, help="write {endpoint, port, pid} when ready")
    serve.add_argument(
        "--listen-fd",
        type=int,
        help=argparse.SUPPRESS,  # a listening socket its parent bound on --host/--port
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=32 * 1024 * 1024,
        help="larger OTLP payloads are refused with 413 (default 32 MiB)",
    )
    serve.set_defaults(handler=_serve, viewer=viewer)
    return serve


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from rollgym.event_loop import loop_factory
    from rollgym.tracestore.access import TOKEN_ENV, otel_headers_value, store_token
    from rollgym.tracestore.lifecycle import ListenError, serve
    from rollgym.tracestore.store import EXIT_UNUSABLE_STORE, UnusableStoreFile

    if args.compare is not None and not args.compare.is_dir():
        print(
            f"rollgym traces serve: --compare {args.compare}: no such run directory",
            file=sys.stderr,
        )
        return 2
    for folder in args.runs:
        if not folder.is_dir():
            print(f"rollgym traces serve: --runs {folder}: no such directory", file=sys.stderr)
            return 2
    if args.run_dir is not None and not args.run_dir.is_dir():
        # a run's folder is made by the run; one made here would be an empty run to show
        problem = "not a directory" if args.run_dir.exists() else "no such run directory"
        print(f"rollgym traces serve: --run-dir {args.run_dir}: {problem}", file=sys.stderr)
        return 2
    db = args.db
    if args.run_dir is not None and args.db == Path("traces.db"):
        db = args.run_dir / "traces.db"
    token = store_token(args.host)
    if token is not None and not os.environ.get(TOKEN_ENV):
        print(
            f"bearer token required: give exporters "
            f"OTEL_EXPORTER_OTLP_TRACES_HEADERS={otel_headers_value(token)}",
            flush=True,
        )
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(
                serve(
                    db,
                    args.host,
                    args.port,
                    ready_file=args.ready_file,
                    max_body=args.max_body_bytes,
                    allow_hosts=tuple(args.allow_host),
                    token=token,
                    listen_fd=args.listen_fd,
                    extra_routes=(
                        args.viewer(db, args.run_dir, args.compare, tuple(args.runs))
                        if args.viewer
                        else None
                    ),
                )
            )
    except ListenError as exc:
        print(f"rollgym traces serve: {exc.strerror}", file=sys.stderr)
        return 2
    except UnusableStoreFile as exc:
        print(f"{LINE_PREFIX}{exc}", file=sys.stderr)
        return EXIT_UNUSABLE_STORE
    return 0
