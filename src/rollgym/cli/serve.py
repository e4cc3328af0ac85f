"""``rollgym serve CONFIG [NAME ...]``: a job's servers without the driver, until Ctrl-C.

Prints one ``name URL`` line per server once all are healthy (stdout, flushed, so a script
can read them), then serves until SIGINT or SIGTERM and stops every server cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from rollgym.cli.job_command import (
    EXIT_CONFIG,
    EXIT_ERROR,
    add_job_command,
    config_error,
    load_starting_early,
    rollgym_error,
)

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "handle", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` subcommand."""
    parser = add_job_command(
        subparsers,
        "serve",
        help="start a job's servers without the driver and print their URLs",
        description=(
            "Start the servers of CONFIG (all, or the NAMEd ones with the servers they name) "
            "exactly as 'rollgym run' would, print one 'name URL' line per server, and serve "
            "until Ctrl-C or SIGTERM; then stop them all. Logs and traces go to "
            "run.output_dir (default runs/<run id>/). Use it to develop an agent or to point "
            "an OpenAI SDK at a model server: base_url=<URL>/v1."
        ),
        example="rollgym serve examples/quickstart.yaml solver run.output_dir=runs/dev",
    )
    parser.add_argument(
        "names",
        metavar="NAME|KEY=VALUE",
        nargs="*",
        help="servers to start (default: all of them); an argument with '=' is a dotted "
        "override, as for 'rollgym run' (run.output_dir=runs/dev)",
    )
    parser.set_defaults(handler=handle)


async def _serve(config: Any, names: list[str]) -> None:
    from rollgym.driver.serve_only import serve_servers
    from rollgym.urls import redact_url

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with serve_servers(config, names) as served:
            for name, url in served.urls.items():
                print(f"{name} {redact_url(url)}", flush=True)
            print(
                f"rollgym: serving {len(served.urls)} server(s); logs in {served.output_dir}; "
                "Ctrl-C to stop",
                file=sys.stderr,
                flush=True,
            )
            await stop.wait()
        print("rollgym: stopped", file=sys.stderr, flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def handle(args: argparse.Namespace) -> int:
    """Serve; exit 0 after a clean stop, 2 for a bad config, 1 when a server did not start."""
    from rollgym.errors import ConfigError, RollgymError
    from rollgym.placement.forked import discard_early

    try:
        overrides = [item for item in args.names if "=" in item]
        names = [item for item in args.names if "=" not in item]
        config = load_starting_early(args.config, overrides)
        from rollgym.event_loop import loop_factory

        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_serve(config, names))
    except ConfigError as exc:
        return config_error(exc)
    except RollgymError as exc:
        return rollgym_error(exc)
    finally:
        discard_early()
    return 0
