"""``rollgym traces serve|ls|show|slowest|profile|check``: options -> calls of the store and
the read side.

Why thin: every command's logic lives below (``serve`` in rollgym.tracestore; queries, check,
profile and the viewer in rollgym.reading) so the viewer, scripts and tests call the same
code; this module only parses options and prints. Imports happen inside handlers so
``rollgym --help`` stays fast. ``python -m rollgym.cli.traces serve`` is how a run starts its
store (:mod:`rollgym.tracestore.store_process`): the user's own command, viewer included.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollgym.cli.arg_types import at_least, probability
from rollgym.cli.console import stdout_console

# ``serve`` is the store's own command: its home is the trace store; ``rollgym traces`` adds it
# to its sub-commands and hands it the viewer.
from rollgym.tracestore.serve_command import add_serve_parser

if TYPE_CHECKING:
    from aiohttp import web
    from rich.console import Console

    from rollgym.reading.query_rows import SpanRow

__all__ = ["add_serve_parser", "main", "register"]


def _viewer(
    db_path: Path, run_dir: Path | None, compare_dir: Path | None, runs: Sequence[Path] = ()
) -> Callable[[web.Application], None]:
    """The viewer the store serves (the read side's; loaded only to serve)."""
    from rollgym.reading.run_views import viewer

    return viewer(db_path, run_dir, compare_dir, runs)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``traces`` and its sub-commands to the ``rollgym`` parser."""
    traces = subparsers.add_parser("traces", help="the local trace store: serve, query, check")
    commands = traces.add_subparsers(dest="traces_command", metavar="COMMAND")
    commands.required = True
    add_serve_parser(commands, viewer=_viewer)

    ls = commands.add_parser("ls", help="list rollouts (one row per attempt) with trace ids")
    _run_dir(ls)
    ls.add_argument("--limit", type=at_least(1), default=50, help="rows per page (default 50)")
    ls.add_argument("--offset", type=at_least(0), default=0, help="rows to skip: the page start")
    ls.add_argument("--outcome", help="only this outcome: ok, error or timeout")
    ls.add_argument("--dispatch-name", help="only rollouts of this agent / environment")
    ls.add_argument("--min-reward", type=float, help="only rollouts with reward >= this")
    ls.add_argument("--max-reward", type=float, help="only rollouts with reward <= this")
    ls.add_argument("--min-duration-ms", type=float, help="only dispatches at least this long")
    ls.add_argument("--max-duration-ms", type=float, help="only dispatches at most this long")
    ls.add_argument(
        "--sort",
        default="start",
        choices=["start", "duration", "reward", "rollout_id", "outcome", "dispatch_name"],
        help="order of the rows (default: start time)",
    )
    ls.add_argument("--desc", dest="descending", action="store_true", help="sort descending")
    ls.set_defaults(handler=_one_line(_ls))

    show = commands.add_parser("show", help="a rollout's trace tree, every attempt")
    _run_dir(show)
    show.add_argument("rollout_id", help="a rollout id (3-0); its retries (3-0-a1, ...) too")
    show.add_argument(
        "--conversation",
        action="store_true",
        help="what was said: messages, tool calls and outputs, the answer, the reward "
        "(from the run's trajectory; per model call tokens and latency)",
    )
    show.add_argument(
        "--tokens",
        action="store_true",
        help="with --conversation: each answer's generated tokens (id, text where known, "
        "probability), unlikely ones marked (needs run.capture_tokens)",
    )
    show.add_argument(
        "--low-p",
        type=probability,
        default=0.1,
        metavar="P",
        help="with --tokens: mark tokens whose probability is under P (default 0.1)",
    )
    show.set_defaults(handler=_one_line(_show))

    slowest = commands.add_parser("slowest", help="the long tail and where it spent its time")
    _run_dir(slowest)
    slowest.add_argument("-n", type=at_least(1), default=10, help="how many rollouts (default 10)")
    slowest.set_defaults(handler=_one_line(_slowest))

    profile = commands.add_parser(
        "profile", help="where rollout time went: phase shares, stragglers, timeline"
    )
    _run_dir(profile)
    profile.add_argument(
        "-n", type=at_least(0), default=10, help="how many stragglers and groups (default 10)"
    )
    profile.add_argument(
        "--bins", type=at_least(1), default=60, help="timeline points (default 60)"
    )
    profile.add_argument(
        "--metrics", action="store_true", help="add the run's metrics, derived from its spans"
    )
    profile.set_defaults(handler=_one_line(_profile))

    check = commands.add_parser("check", help="verify the trace contract; non-zero on violation")
    _run_dir(check)
    check.add_argument(
        "--data",
        action="store_true",
        help="certify the run's data instead: every trajectory against the engine's own record "
        "(its spans, else its answered usage) and its invariants; one line per violation",
    )
    check.set_defaults(handler=_one_line(_check))


def _run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="run output directory (or a traces.db file)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


class _Unreadable(Exception):
    """A run directory or trace store the command cannot read: one line, exit 2."""


def _one_line(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a reading command; a missing run directory, a file that is not a trace store or an
    unreadable one is one line naming the path (exit 2), never a traceback."""

    def run(args: argparse.Namespace) -> int:
        import sqlite3

        import apsw  # traces profile reads the store through apsw

        from rollgym.reading.queries import db_path_of
        from rollgym.tracestore.schema import StoreVersionError

        try:
            return handler(args)
        except (_Unreadable, StoreVersionError) as exc:
            problem = str(exc)
        except (sqlite3.DatabaseError, apsw.Error) as exc:
            problem = f"{db_path_of(args.run_dir)}: not a readable trace store ({exc})"
        except OSError as exc:
            problem = f"{exc.filename or args.run_dir}: {exc.strerror or exc}"
        print(f"rollgym traces {args.traces_command}: {problem}", file=sys.stderr)
        return 2

    return run


def _store_path(args: argparse.Namespace) -> Path:
    """The trace store file the command reads; :class:`_Unreadable` when there is none."""
    from rollgym.reading.queries import db_path_of

    if not args.run_dir.exists():
        raise _Unreadable(f"{args.run_dir}: no such run directory or trace store file")
    path = db_path_of(args.run_dir)
    if not path.is_file():
        raise _Unreadable(f"{path}: no trace store here (was the run's telemetry off?)")
    return path


def _open(args: argparse.Namespace) -> Any:
    from rollgym.tracestore.store import connect_readonly

    return connect_readonly(_store_path(args))


def _emit_json(value: object) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _answer(args: argparse.Namespace, value: object, show: Callable[..., object]) -> None:
    """``--json``: ``value`` as indented JSON on stdout; else ``show(console, value)`` for a person."""
    if args.json:
        _emit_json(value)
    else:
        show(stdout_console(), value)


def _ls(args: argparse.Namespace) -> int:
    from rollgym.reading import queries, render

    with _open(args) as conn:
        # the options above are the query's keywords, by the same names
        page = queries.list_rollouts(conn, **{key: getattr(args, key) for key in queries.PAGE_KEYS})
    _answer(args, page, render.rollouts_table)
    return 0


def _show(args: argparse.Namespace) -> int:
    from rollgym.reading import queries, render

    if args.conversation or args.tokens:
        return _conversation(args)
    with _open(args) as conn:
        detail = queries.rollout_detail(conn, args.rollout_id)
    failure = _failure_record(args)  # the agent's own frames and its log (failures.jsonl)
    if args.json:
        own = {key: failure.get(key) for key in ("frames", "log")} if failure else None
        _emit_json({**detail, "failure": own} if own else detail)
    else:
        console = stdout_console()
        render.rollout_trees(console, detail)
        if failure is not None:
            from rollgym.reading.conversation_report import print_frames

            print_frames(console, failure.get("frames"), failure.get("log"))
    return 0 if detail["attempts"] else 1


def _failure_record(args: argparse.Namespace) -> dict[str, Any] | None:
    """The rollout's final failure when it has the agent's own frames (failures.jsonl)."""
    from rollgym.reading.run_reader import read_rollout

    if not args.run_dir.is_dir():
        return None
    failure = read_rollout(args.run_dir, args.rollout_id).failure
    return dict(failure) if failure is not None and failure.get("frames") else None


def _conversation(args: argparse.Namespace) -> int:
    from rollgym.reading import queries
    from rollgym.reading.conversation_report import (
        conversation_view,
        model_latencies,
        print_conversation,
        records_trajectories,
    )
    from rollgym.reading.run_reader import read_rollout

    run_dir = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    files = read_rollout(run_dir, args.rollout_id)
    if files.rollout is None and files.failure is None:
        print(
            f"rollgym traces show: {run_dir}: no rollout {args.rollout_id!r} in its "
            "rollouts.jsonl or failures.jsonl",
            file=sys.stderr,
        )
        return 1
    spans: list[SpanRow] = []
    if (run_dir / "traces.db").exists():
        with _open(args) as conn:
            detail = queries.rollout_detail(conn, args.rollout_id)
        spans = [span for attempt in detail["attempts"] for span in attempt["spans"]]
    view = conversation_view(
        args.rollout_id,
        files,
        model_latencies(spans),
        tokens=args.tokens,
        low_p=args.low_p,
        recorded=records_trajectories(run_dir),
    )
    _answer(args, view, print_conversation)
    return 0


def _slowest(args: argparse.Namespace) -> int:
    from rollgym.reading import queries, render

    with _open(args) as conn:
        items = queries.slowest(conn, args.n)
    _answer(args, items, render.slowest_list)
    return 0


def _profile(args: argparse.Namespace) -> int:
    from rollgym.reading import render
    from rollgym.reading.profile import profile_store

    report = profile_store(_store_path(args), stragglers=args.n, bins=args.bins)
    if args.metrics:
        report["metrics"] = _derived_metrics(args)
    groups = _groups(Path(args.run_dir), args.n)
    if groups is not None:
        report["groups"] = groups
    if args.json:
        _emit_json(report)
    else:
        from rollgym.reading.profile_http import print_http_parts
        from rollgym.reading.profile_timeline import print_timeline

        console = stdout_console()
        render.profile_tables(console, report)
        print_http_parts(console, report)
        print_timeline(console, report)
        if groups is not None:
            from rollgym.reading.group_view import print_groups

            print_groups(console, groups, args.n)
        if args.metrics:
            _print_metrics(console, report["metrics"])
    return 0


def _groups(run_dir: Path, shown: int) -> dict[str, object] | None:
    """The run's reward spread per group (zero-variance first), when RUN is a run folder."""
    from rollgym.reading.group_view import run_groups, run_repeats

    if not (run_dir / "rollouts.jsonl").is_file():
        return None
    return run_groups(run_dir, run_repeats(run_dir)).page(0, shown, zero_variance_first=True)


def _derived_metrics(args: argparse.Namespace) -> dict[str, Any]:
    from rollgym.reading.derived_metrics import derive_metrics

    with _open(args) as conn:
        return derive_metrics(conn)


def _print_metrics(console: Console, metrics: dict[str, Any]) -> None:
    console.print("metrics (derived from the spans):")
    for name, points in metrics.items():
        for point in points:
            labels = ",".join(f"{k}={v}" for k, v in point["attributes"].items())
            values = {k: v for k, v in point.items() if k != "attributes"}
            shown = " ".join(
                f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
            )
            console.print(f"  {name}{{{labels}}} {shown}", markup=False, highlight=False)


def _check(args: argparse.Namespace) -> int:
    from rollgym.reading import render
    from rollgym.reading.check import check_run

    if args.data:
        return _check_data(args)
    run_dir = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    with _open(args) as conn:
        report = check_run(run_dir, conn)
    if args.json:
        _emit_json(report.as_dict())
    else:
        render.check_report(stdout_console(), report)
    return 0 if report.ok else 1


def _check_data(args: argparse.Namespace) -> int:
    """``check --data``: one line per violation on stdout, then the count per rule; exit 1 on
    any violation. The trace store is optional: without one, the answered usage is the
    engine's record."""
    from rollgym.reading.certify import RULES, certify_run
    from rollgym.reading.run_reader import UnreadableLine

    if not args.run_dir.exists():
        raise _Unreadable(f"{args.run_dir}: no such run directory")
    run_dir = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    try:
        if (run_dir / "traces.db").is_file():
            with _open(argparse.Namespace(run_dir=run_dir)) as conn:
                report = certify_run(run_dir, conn)
        else:
            report = certify_run(run_dir, None)
    except (FileNotFoundError, UnreadableLine) as exc:
        raise _Unreadable(str(exc)) from None
    if args.json:
        _emit_json(report.as_dict())
        return 0 if report.ok else 1
    for violation in report.violations:
        print(violation.line())
    print(f"token counts held against {report.engine_record}")
    print(f"policy versions {report.versions}")
    counts = ", ".join(f"{rule} {report.counts[rule]}" for rule in RULES if rule in report.counts)
    verdict = (
        f"{len(report.violations)} violations in {report.uncertified} of {report.rollouts} "
        f"rollouts ({report.model_calls} model calls): {counts}"
        if report.violations
        else f"0 violations: {report.rollouts} rollouts certified ({report.model_calls} model calls)"
    )
    print(verdict)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m rollgym.cli.traces ...``: the same commands without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="rollgym")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["traces", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
