"""A job's servers without the driver: what ``rollgym serve CONFIG [NAME ...]`` runs.

How a user develops an agent, or points an OpenAI SDK at rollgym's model servers: the servers
start exactly as ``rollgym run`` starts them (same launcher, same telemetry, traces into the
run folder's local store), nothing is dispatched, and they stop when the caller says so.
Naming servers starts only those and the servers they name (their ``model``,
``environment``, ``upstream`` options), transitively.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from rollgym.config import JobConfig
from rollgym.driver.job import prepare_output, resolve_run
from rollgym.driver.job_telemetry import JobTelemetry
from rollgym.errors import ConfigError


@dataclass(frozen=True)
class Served:
    """The servers that are up: their URLs by name, in the config's order, and the run folder."""

    urls: dict[str, str]
    output_dir: Path
    run_id: str


def with_dependencies(config: JobConfig, names: Iterable[str]) -> JobConfig:
    """The config cut down to ``names`` and everything they need (all servers when empty)."""
    from rollgym.placement.launcher import dependencies

    wanted = list(names)
    if not wanted:
        return config
    unknown = [name for name in wanted if name not in config.servers]
    if unknown:
        raise ConfigError(
            f"no server named {', '.join(map(repr, unknown))}; "
            f"the config has: {', '.join(config.servers)}",
            key_path="servers",
        )
    needs = dependencies(config)
    keep: set[str] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name not in keep:
            keep.add(name)
            pending.extend(needs.get(name, ()))
    servers = {name: server for name, server in config.servers.items() if name in keep}
    return config.model_copy(update={"servers": servers})


@asynccontextmanager
async def serve_servers(config: JobConfig, names: Iterable[str] = ()) -> AsyncIterator[Served]:
    """Start the servers (``names`` and their dependencies, or all); yield them; stop them all.

    Leaving the block for any reason stops every launched process, as a run does.
    """
    from rollgym.placement.forked import discard_for, prestart_for
    from rollgym.placement.launcher import launch_servers

    config = with_dependencies(config, names)
    run_id, output_dir = resolve_run(config)
    prepare_output(config, run_id, output_dir)
    telemetry = JobTelemetry()
    try:
        prestart_for(config, output_dir)  # the servers' imports overlap the store's start
        telemetry.start(config, output_dir, run_id)
        async with launch_servers(
            config, run_id=run_id, output_dir=output_dir, env=telemetry.server_env
        ) as urls:
            ordered = {name: urls[name] for name in config.servers if name in urls}
            yield Served(ordered, output_dir, run_id)
    finally:
        discard_for(output_dir)
        telemetry.flush()
        await telemetry.stop_store()
