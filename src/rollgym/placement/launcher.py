"""Start the run's servers as local processes, and stop every one of them whatever happens.

``async with launch_servers(config, run_id=..., output_dir=..., env=...) as urls:`` yields
``{server name: base URL}`` for every server of the config. Servers with ``impl`` are launched
all at once where the placement fixes their addresses before they start (local processes:
:mod:`rollgym.placement.reserved`), so one slow server delays no other; where it cannot (Ray
actors), in dependency order (models and environments before the agents that name them, from
each implementation's ``Options.server_refs``), concurrently where the order allows. Servers
given by ``url`` are only health-checked. Leaving the block for any reason (normal exit, an
exception, Ctrl-C, cancellation) stops every launched process: SIGTERM, up to 10 s, SIGKILL.

A launched server that exits during the launch (even after it was healthy) stops the launch
with a :class:`~rollgym.errors.LaunchError` naming it, its exit status and its log tail,
before the servers that depend on it start. During the run, a
:class:`~rollgym.placement.supervisor.Supervisor` given to :func:`launch_servers` watches the
replicas and restarts a dead one on its port (:meth:`_Launch.restart`), in either placement.

Where the servers run is the placement's business (:class:`~rollgym.placement.base.Placement`):
local processes (:mod:`rollgym.placement.local`) or, with ``run.placement: ray``, Ray actors
(:mod:`rollgym.placement.ray`); everything else here is the same.

Startup telemetry: ``gym.startup`` around the whole launch and one ``gym.server.startup`` per
server, ending when it is healthy (gate.startup).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import rollgym.start_gate as start_gate
from rollgym.config import JobConfig, ServerConfig
from rollgym.errors import LaunchError
from rollgym.placement.base import PlacedServer, Placement
from rollgym.placement.health import HealthSession, wait_healthy
from rollgym.placement.local import LocalPlacement
from rollgym.placement.supervisor import POLL_S, Supervisor
from rollgym.server_urls import ServerUrls
from rollgym.servers.spec import ServeSpec, instance_name
from rollgym.telemetry.groups import gate
from rollgym.urls import redact_text

HEALTH_TIMEOUT_S = 60.0
#: A ``url:`` server that refuses every connection this long is not there: fail fast.
REFUSED_FOR_S = 5.0
STOP_GRACE_S = 10.0


def dependencies(config: JobConfig) -> dict[str, set[str]]:
    """For each launched server, the servers its options name (``server_refs``)."""
    deps: dict[str, set[str]] = {}
    for name, server in config.servers.items():
        if server.impl is None:
            continue
        deps[name] = {target for target in server.references() if target in config.servers}
    return deps


def launch_waves(deps: Mapping[str, set[str]]) -> list[list[str]]:
    """Group servers into waves; each wave needs only servers of earlier waves (or url: ones)."""
    pending = {name: {d for d in targets if d in deps} for name, targets in deps.items()}
    waves: list[list[str]] = []
    done: set[str] = set()
    while pending:
        wave = sorted(name for name, targets in pending.items() if targets <= done)
        if not wave:
            cycle = ", ".join(sorted(pending))
            raise LaunchError(
                f"servers name each other in a cycle: {cycle}", server=sorted(pending)[0]
            )
        waves.append(wave)
        done.update(wave)
        for name in wave:
            del pending[name]
    return waves


class _Launch:
    """The state of one launch: the processes started so far and the URLs known so far."""

    def __init__(
        self, config: JobConfig, run_id: str, output_dir: Path, placement: Placement
    ) -> None:
        self.config = config
        self.run_id = run_id
        self.output_dir = output_dir
        self.logs = output_dir / "logs"
        self.urls: dict[str, str] = {}
        #: ``{server: [replica URLs]}`` of the servers with several replicas.
        self.replicas: dict[str, list[str]] = {}
        #: Addresses fixed before their servers started (what a server is told of the others).
        self.planned: dict[str, str] = {}
        self.planned_replicas: dict[str, list[str]] = {}
        self.placement = placement

    async def run(self, session: HealthSession) -> None:
        checks = [
            self._traced(name, server, self._check_url(name, server, session))
            for name, server in self.config.servers.items()
            if server.url is not None
        ]
        await _all_or_cancel(checks)
        for wave in self._waves():
            self.raise_if_one_died(before=wave)
            starts = [
                self._traced(name, self.config.servers[name], self._start(name, session))
                for name in wave
            ]
            await _all_or_cancel(starts, watch=self._deaths_while(wave))
        self.raise_if_one_died(before=None)

    def _waves(self) -> list[list[str]]:
        """One wave of every launched server when the placement can fix all their addresses
        in advance; otherwise the dependency order's waves."""
        deps = dependencies(self.config)
        waves = launch_waves(deps)  # a cycle is an error in either case
        planned: dict[str, list[str]] = {}
        for name in deps:
            urls = [
                self.placement.reserve(instance_name(name, replica))
                for replica in range(self.config.servers[name].replicas)
            ]
            known = [url for url in urls if url is not None]
            if len(known) < len(urls):
                return waves
            planned[name] = known
        for name, fixed in planned.items():
            self.planned[name] = fixed[0]
            if len(fixed) > 1:
                self.planned_replicas[name] = fixed
        return [sorted(deps)] if deps else []

    def raise_if_one_died(self, *, before: list[str] | None) -> None:
        """A :class:`LaunchError` for the first launched server that has exited since healthy."""
        for replica in self.placement.launched().values():
            status = replica.exit_status()
            if status is not None:
                after = f", before {', '.join(before)} started" if before else ""
                raise replica.failure(
                    f"exited ({status}) during the launch, after it was healthy{after}"
                )

    async def _deaths_while(self, wave: list[str]) -> None:
        """Until the wave is healthy, raise as soon as an earlier (healthy) server exits."""
        while not all(name in self.urls for name in wave):
            self.raise_if_one_died(before=[name for name in wave if name not in self.urls])
            await asyncio.sleep(POLL_S)

    def launched(self) -> Mapping[str, PlacedServer]:
        """The healthy replicas, local processes or Ray actors (what the supervisor watches)."""
        return self.placement.launched()

    async def restart(self, name: str) -> str:
        """Place replica ``name`` again where it was, on the port it had; its URL is unchanged."""
        return await self.placement.restart(name, HEALTH_TIMEOUT_S)

    async def _traced(self, name: str, server: ServerConfig, work: Any) -> None:
        if gate.startup:
            from rollgym.telemetry import spans

            with spans.server_startup_span(name, server.kind, server.url) as span:
                url = await work
                if server.url is None:  # a launched server: its address is known only now
                    spans.record_server_address(span, url)
        else:
            await work

    async def _check_url(self, name: str, server: ServerConfig, session: HealthSession) -> str:
        assert server.url is not None
        url = server.url.rstrip("/")

        def failure(problem: str) -> LaunchError:
            return LaunchError(
                redact_text(f"the running server at {url} is {problem}"), server=name
            )

        await wait_healthy(
            url,
            session=session,
            deadline=time.monotonic() + HEALTH_TIMEOUT_S,
            failure=failure,
            strict=False,
            refused_for_s=REFUSED_FOR_S,
        )
        self.urls[name] = url
        return url

    async def _start(self, name: str, session: HealthSession) -> str:
        """Start every replica of server ``name`` concurrently; its first replica's URL."""
        server = self.config.servers[name]
        assert server.impl is not None
        specs = [
            ServeSpec(
                name=name,
                kind=server.kind,
                impl=server.impl,
                ready_file=str(self.logs / f"{instance_name(name, replica)}.ready"),
                options=server.options,
                server_urls={**self.planned, **self.urls},
                server_replicas={**self.planned_replicas, **self.replicas},
                run_id=self.run_id,
                output_dir=str(self.output_dir),
                max_request_bytes=self.config.run.max_request_bytes,
                replica=replica,
            )
            for replica in range(server.replicas)
        ]
        urls = await asyncio.gather(
            *(
                self.placement.start(spec, session=session, timeout_s=HEALTH_TIMEOUT_S)
                for spec in specs
            )
        )
        if len(urls) > 1:
            self.replicas[name] = list(urls)
        self.urls[name] = urls[0]
        return urls[0]

    async def stop(self) -> None:
        """Stop every launched server, concurrently; if interrupted, kill the rest."""
        try:
            # a stopping server first flushes its spans, for up to telemetry.flush_timeout_s
            await self.placement.stop(STOP_GRACE_S + self.config.telemetry.flush_timeout_s)
        finally:
            self.placement.close()


async def _all_or_cancel(works: list[Any], watch: Any = None) -> None:
    """Run coroutines concurrently; on the first failure cancel the others and raise it.

    ``watch`` (a coroutine that raises when something goes wrong meanwhile, such as a death
    of a server started earlier) runs beside the works and is cancelled as soon as they are
    all done: the launch does not wait for the watcher's next look (up to ``POLL_S``, which
    was a fifth of a second on every ``rollgym run``'s path to its first rollout).
    """
    tasks = [asyncio.ensure_future(work) for work in works]
    everything = tasks if watch is None else [*tasks, asyncio.ensure_future(watch)]
    try:
        pending = set(everything)
        while any(not task.done() for task in tasks):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:  # every task that ends passes here once: its failure is raised
                task.result()
    finally:
        for task in everything:
            task.cancel()  # on a failure the others; on success only the watcher is left
        await asyncio.gather(*everything, return_exceptions=True)


@asynccontextmanager
async def launch_servers(
    config: JobConfig,
    *,
    run_id: str,
    output_dir: Path,
    env: Mapping[str, str],
    supervisor: Supervisor | None = None,
) -> AsyncIterator[ServerUrls]:
    """Launch the configured servers; yield ``{name: base URL}``; stop them all on leaving.

    A server with several replicas is known by its first replica's URL; the yielded dict's
    ``replicas`` lists all of them (hand it to :class:`~rollgym.http.client.HttpClient`).

    Raises :class:`~rollgym.errors.LaunchError` naming the server (and quoting the last lines
    of its log) when one does not become healthy within 60 s, or exits during the launch.
    ``supervisor`` watches the launched replicas while the block runs (either placement).
    """
    launch = _Launch(config, run_id, Path(output_dir), _placement(config, run_id, output_dir, env))
    try:
        # A trace store that waits for the forks (rollgym/start_gate.py) waits until every
        # server is up: nobody waits for it, and its start-up would take the cores the
        # servers' own take to get ready.
        start_gate.hold()
        try:
            async with HealthSession() as session:
                if gate.startup:
                    from rollgym.telemetry import spans

                    with spans.startup_span():
                        await launch.run(session)
                else:
                    await launch.run(session)
        finally:
            start_gate.release()
        if supervisor is not None:
            supervisor.start(launch)
        yield ServerUrls(launch.urls, replicas=launch.replicas)
    finally:
        if supervisor is not None:
            await supervisor.stop()
        await launch.stop()


def _placement(
    config: JobConfig, run_id: str, output_dir: Path, env: Mapping[str, str]
) -> Placement:
    """Local processes, or Ray actors for ``run.placement: ray`` (Ray imported only then)."""
    if config.run.placement == "ray":
        from rollgym.placement.ray import RayPlacement

        ray = RayPlacement.connect(config.run.ray_address, run_id=run_id, env=dict(env))
        for name, server in config.servers.items():
            ray.configure(name, server.ray)
        return ray
    return LocalPlacement(env, Path(output_dir) / "logs")
