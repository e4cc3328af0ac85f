"""``rollgym run CONFIG [key=value ...]``: parse, load the config, call :func:`run_job`.

Thin on purpose: everything it does is one call of the public API, so a script can do the same
with ``asyncio.run(run_job(load_config(path, overrides)))``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from rollgym.cli.console import stdout_console
from rollgym.cli.job_command import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    add_job_command,
    config_error,
    load_starting_early,
    rollgym_error,
)

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "EXIT_INTERRUPTED", "handle", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` subcommand."""
    parser = add_job_command(
        subparsers,
        "run",
        help="run a rollout-collection job from a YAML config",
        description=(
            "Launch the configured servers, stream the input rows through them with bounded "
            "concurrency and retries, and write rollouts.jsonl, failures.jsonl, summary.json, "
            "progress.json and config.yaml to run.output_dir (default runs/<run id>/). Running "
            "the same command again on the same output directory resumes it."
        ),
        example="rollgym run examples/quickstart.yaml run.concurrency=256 run.repeats=8",
    )
    parser.add_argument(
        "overrides",
        metavar="KEY=VALUE",
        nargs="*",
        help="dotted overrides applied on top of CONFIG, values parsed as YAML "
        "(run.concurrency=256, run.output_dir=runs/x, telemetry.preset=off)",
    )
    parser.add_argument(
        "--no-table",
        action="store_true",
        help="do not print the summary table at the end (summary.json is written either way)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Run the job; exit 0 when it finished, 130 when interrupted, 2 for a bad config."""
    from rollgym.errors import ConfigError, RollgymError
    from rollgym.placement.forked import discard_early

    try:
        config = load_starting_early(args.config, args.overrides)
    except ConfigError as exc:
        discard_early()
        return config_error(exc)
    if config.run.output_dir is not None:
        from rollgym.driver.run_lock import check_usable

        try:  # the folder's one-line refusal before the driver's imports
            check_usable(config.run.output_dir)
        except ConfigError as exc:
            discard_early()
            return config_error(exc)
        except RollgymError as exc:
            discard_early()
            return rollgym_error(exc)
    from rollgym.driver.job import run_job
    from rollgym.event_loop import loop_factory
    from rollgym.reading.report import (
        nothing_completed_line,
        nothing_left_line,
        print_report,
        telemetry_loss_line,
    )

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            summary = runner.run(run_job(config, handle_signals=True))
    except ConfigError as exc:
        return config_error(exc)
    except (KeyboardInterrupt, asyncio.CancelledError):  # before the collection began
        print(
            f"rollgym: interrupted; to resume: {resume_command(args, config, None)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except RollgymError as exc:
        return rollgym_error(exc)
    finally:
        discard_early()
    if not args.no_table:
        print_report(summary, stdout_console())
    loss = telemetry_loss_line(summary)
    if loss is not None:
        print(loss, file=sys.stderr)  # said loudly, with or without the table
    nothing = nothing_left_line(summary) or nothing_completed_line(summary)
    if nothing is not None:
        print(nothing, file=sys.stderr)
    if summary.status == "interrupted":
        print(
            f"rollgym: interrupted; to resume: {resume_command(args, config, summary.output_dir)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 0


def resume_command(args: argparse.Namespace, config: Any, output_dir: str | None) -> str:
    """The command line that resumes this run: this one, with ``run.output_dir`` added when
    the folder was named by a generated run id (running the same line again would start a
    new run in a new folder)."""
    import shlex

    from rollgym.printable import printable

    words = ["rollgym", "run", args.config, *args.overrides]
    if config.run.output_dir is None and config.run.run_id is None and output_dir:
        words.append(f"run.output_dir={output_dir}")
    return printable(shlex.join(words))  # an argument's control characters stay on this line
