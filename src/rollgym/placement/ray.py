"""``run.placement: ray``: every launched server runs as a Ray actor instead of a local process.

The driver does not change: :func:`rollgym.placement.launcher.launch_servers` still yields
``{name: base URL}``, health-checks each URL and stops everything on leaving. Only where a
server runs changes. Each :class:`ServerActor` (one Ray worker process per server,
``num_cpus=0``) serves the same app as ``python -m rollgym.servers.server_process``
(:class:`~rollgym.servers.server_process.AppServer`) on a thread with its own event loop, bound on its
node's IP (``127.0.0.1`` when the whole cluster is the driver's own machine) on a free port.

Nothing crosses implicitly (TELEMETRY.md, "Propagation and correlation"):

- telemetry settings: the launcher hands the actor the same env dict a local server gets
  (``_ROLLGYM_TELEMETRY`` + the resolved ``OTEL_*``), as a constructor argument;
- trace context: ``start`` receives the ``gym.server.startup`` span's context as a W3C carrier
  dict (:func:`~rollgym.placement.ray_context.remote_with_context`) and attaches it while it builds
  and starts the server; the server thread itself starts in an empty context, so no request
  ever inherits the startup trace.

A replica whose actor dies (its worker process killed, its node gone) or whose server ends on
its own is seen at once: each replica has one pending ``until_stopped`` call, which Ray fails
when the actor dies. The :class:`~rollgym.placement.supervisor.Supervisor` then treats it like
a dead local process: out of rotation, reported, and placed again (:meth:`RayPlacement.restart`)
on the same node and port, within ``servers.<name>.restart``.

``ray`` is imported lazily: the core install does not have it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rollgym.child_process import log_tail
from rollgym.config import RayResources
from rollgym.errors import ConfigError, LaunchError
from rollgym.placement.health import HealthSession, wait_healthy
from rollgym.placement.ray_context import in_context, remote_with_context
from rollgym.servers.spec import ServeSpec
from rollgym.servers.start_checks import SetupProblem
from rollgym.telemetry.span_counts import SpanCountRecord

_log = logging.getLogger(__name__)

RAY_MISSING = "ray needs the 'ray' extra: pip install 'rollgym[ray]'"
LOOPBACK = "127.0.0.1"
_POLL_S = 0.02
#: Calls one actor serves at once: ``until_stopped`` waits on one while ``stop`` runs.
_ACTOR_CONCURRENCY = 4
#: Driver ``OTEL_*`` variables whose names contain one of these are never shipped to an actor.
_SECRET_MARKERS = ("HEADERS", "KEY", "TOKEN", "SECRET", "PASSWORD", "CERTIFICATE")


def import_ray() -> ModuleType:
    """``ray``, or a ConfigError naming ``run.placement`` when the extra is not installed."""
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING, key_path="run.placement") from None
    return ray


def actor_env(env: dict[str, str]) -> dict[str, str]:
    """What a server actor gets as its environment: the driver's non-secret ``OTEL_*`` variables
    (a local server inherits them) overlaid with the launcher's ``env``.

    Secret-bearing variables (OTLP headers) are not shipped through Ray: set them on the
    cluster's nodes (docs/scale.md).
    """
    inherited = {
        key: value
        for key, value in os.environ.items()
        if key.startswith("OTEL_") and not any(marker in key for marker in _SECRET_MARKERS)
    }
    return {**inherited, **env}


class ServerActor:
    """One rollgym server inside a Ray actor (wrapped with ``ray.remote`` at launch time).

    Its process is its own (Ray gives each actor a worker process), so process-wide telemetry
    is set up once here, from the settings passed in, exactly like a server process does.
    """

    def __init__(self, spec: ServeSpec, env: dict[str, str]) -> None:
        from rollgym.servers.server_process import setup_server_telemetry

        os.environ.update(env)  # for OpenTelemetry libraries inside the server, too
        self.spec = spec
        self.log_path = _redirect_output(spec)
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        self.telemetry = setup_server_telemetry(spec, env)
        self.server: Any = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        #: Set by :meth:`stop`: the server's end is then expected, not a death.
        self.stopping = threading.Event()

    @in_context
    def start(self, host: str | None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Build the app and serve it on a thread; once uvicorn has started, where it serves:
        ``{"url", "pid", "node_id"}`` (a restart places the replica on that node again).

        Runs with the launcher's ``gym.server.startup`` context attached (``trace_carrier``).
        """
        import ray

        from rollgym.servers.server_process import AppServer

        if host is None:
            host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.server = AppServer(self.spec, self.telemetry, host)
        # A new thread starts in an empty context: the startup trace stays out of requests.
        self.thread = threading.Thread(
            target=self._serve, name=f"rollgym-server-{self.spec.instance}", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"server {self.spec.instance!r} did not start: {self.error or 'timed out'}"
                )
            time.sleep(_POLL_S)
        where = {
            "url": str(self.server.url),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }
        # in its log, where an operator (or a test) finds the process that serves this replica
        print(
            f"rollgym: server {self.spec.instance!r} serving at {where['url']} "
            f"(Ray actor pid {where['pid']}, node {where['node_id']})",
            flush=True,
        )
        return where

    def until_stopped(self) -> str | None:
        """Return when the server has ended: None after :meth:`stop`, else why it ended.

        The launcher keeps one such call pending per replica; if the actor's process dies, Ray
        fails the call, so a death is known without polling.
        """
        if self.thread is not None:
            self.thread.join()
        if self.stopping.is_set():
            return None
        return f"its server ended on its own: {self.error!r}" if self.error else "its server ended"

    def _serve(self) -> None:
        from rollgym.event_loop import loop_factory

        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self.server.serve())
        except BaseException as exc:  # reported by start() / the log
            self.error = exc
            _log.exception("server %r failed", self.spec.name)

    def stop(self, grace_s: float = 10.0) -> SpanCountRecord:
        """Graceful uvicorn shutdown, then flush telemetry; the server's span counts."""
        from rollgym.servers.server_process import finish_telemetry

        self.stopping.set()
        if self.server is not None:
            self.server.request_stop()
        if self.thread is not None:
            self.thread.join(grace_s)
        return finish_telemetry(self.telemetry)


def _redirect_output(spec: ServeSpec) -> Path | None:
    """Send the actor's stdout/stderr to ``<output_dir>/logs/<name>.log`` on its node, like a
    local server's, so a failure can be quoted (on the driver's node) and read later."""
    path = _log_path(spec)
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return None
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return path


@dataclass
class ActorReplica:
    """One healthy replica placed as a Ray actor (a :class:`~rollgym.placement.base.PlacedServer`)."""

    spec: ServeSpec
    actor: Any
    url: str
    pid: int
    node_id: str
    log_path: Path | None
    #: How it ended (set by the placement's watch), None while it serves.
    ended: str | None = None
    watch: asyncio.Task[None] | None = None

    def exit_status(self) -> str | None:
        return self.ended

    def failure(self, problem: str) -> LaunchError:
        return _failure(self.spec, problem)


class RayPlacement:
    """The Ray side of one launch: connect, start actors, stop and kill them, disconnect."""

    def __init__(
        self,
        ray: ModuleType,
        *,
        run_id: str,
        env: dict[str, str],
        started: bool,
        host: str | None,
    ) -> None:
        self.ray = ray
        self.run_id = run_id
        self.env = actor_env(env)
        self.started = started
        #: Where servers bind: loopback on a one-machine cluster, else None (each node's IP).
        self.host = host
        self.actor_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=_ACTOR_CONCURRENCY)(
            ServerActor
        )
        #: Every actor started and not yet killed, by instance (also those still starting).
        self.actors: dict[str, Any] = {}
        #: The healthy replicas by instance (what the supervisor watches).
        self.replicas: dict[str, ActorReplica] = {}
        self.output_dirs: dict[str, str | None] = {}
        #: Per server: the ``.options(...)`` of its actors (resources, scheduling strategy).
        self.options: dict[str, dict[str, Any]] = {}

    def configure(self, server: str, ray: RayResources) -> None:
        """What each actor of ``server`` reserves, and whether its replicas spread over nodes."""
        options: dict[str, object] = {"num_cpus": ray.num_cpus}
        if ray.resources:
            options["resources"] = dict(ray.resources)
        if ray.strategy == "SPREAD":
            options["scheduling_strategy"] = "SPREAD"
        self.options[server] = options

    @classmethod
    def connect(cls, address: str | None, *, run_id: str, env: dict[str, str]) -> RayPlacement:
        """Use the Ray already initialised in this process, else start a local one
        (``address`` None) or join the cluster at ``address``."""
        ray = import_ray()
        started = False
        if not ray.is_initialized():
            if address is None:
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
            started = True
        return cls(ray, run_id=run_id, env=env, started=started, host=_bind_host(ray))

    def actor_name(self, instance: str) -> str:
        """The Ray name of a replica's actor (``ray.get_actor`` finds it while the run lasts):
        ``rollgym:<run id>:<server>`` for the first replica, ``...:<server>@<i>`` for others."""
        return f"rollgym:{self.run_id}:{instance}"

    async def start(self, spec: ServeSpec, *, session: HealthSession, timeout_s: float) -> str:
        """Place one server, wait for its URL and for ``GET /health``; return the base URL."""
        return await self._place(spec, self.options.get(spec.name, {}), session, timeout_s)

    async def restart(self, name: str, timeout_s: float) -> str:
        """Place replica ``name`` again: a new actor on the node the dead one was on, bound to
        the port it had, so every caller's URL for it holds."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        old = self.replicas[name]
        self._kill(name)  # the dead actor's handle; its name is free for the new one
        spec = dataclasses.replace(old.spec, port=int(old.url.rsplit(":", 1)[1]))
        options = {
            **self.options.get(spec.name, {}),
            "scheduling_strategy": NodeAffinitySchedulingStrategy(old.node_id, soft=False),
        }
        async with HealthSession() as session:
            return await self._place(spec, options, session, timeout_s)

    async def _place(
        self,
        spec: ServeSpec,
        options: Mapping[str, object],
        session: HealthSession,
        timeout_s: float,
    ) -> str:
        """Start one actor for ``spec``; once healthy, watch it; its base URL."""
        actor = self.actor_cls.options(name=self.actor_name(spec.instance), **options).remote(
            spec, self.env
        )
        self.actors[spec.instance] = actor
        self.output_dirs[spec.instance] = spec.output_dir
        deadline = time.monotonic() + timeout_s

        def failure(problem: str) -> LaunchError:
            return _failure(spec, problem)

        try:
            try:
                ref = remote_with_context(actor.start, self.host, timeout_s)
                where = await asyncio.wait_for(ref, timeout_s)
            except TimeoutError:
                raise failure(f"Ray actor did not start within {timeout_s:.0f}s") from None
            except Exception as exc:  # RayActorError / RayTaskError carry the actor's traceback
                problem = exc if isinstance(exc, SetupProblem) else getattr(exc, "cause", None)
                if isinstance(problem, SetupProblem):  # its start check's one line
                    raise problem.config_error(spec.name) from None
                raise failure(f"Ray actor failed to start: {exc}") from None
            url = await wait_healthy(
                where["url"], session=session, deadline=deadline, failure=failure
            )
        except BaseException:
            self._kill(spec.instance)
            raise
        replica = ActorReplica(
            spec, actor, url, int(where["pid"]), str(where["node_id"]), _log_path(spec)
        )
        # An empty context: the watch outlives the startup span it would otherwise inherit.
        replica.watch = asyncio.get_running_loop().create_task(
            _watch(replica), context=contextvars.Context()
        )
        self.replicas[spec.instance] = replica
        return url

    def reserve(self, instance: str) -> None:
        """None: an actor's node, and so its URL, is known only once it is placed."""
        return None

    def launched(self) -> dict[str, ActorReplica]:
        """``{instance: its current replica}`` of the replicas that have been healthy."""
        return self.replicas

    async def stop(self, grace_s: float) -> None:
        """Stop every actor's server gracefully (flushing its telemetry), then kill the actors."""
        self._unwatch()
        await asyncio.gather(*(self._stop_one(name, grace_s) for name in list(self.actors)))

    async def _stop_one(self, name: str, grace_s: float) -> None:
        from rollgym.telemetry.span_counts import write_server_record

        actor = self.actors[name]
        try:
            counts = await asyncio.wait_for(actor.stop.remote(grace_s), grace_s + 5.0)
            write_server_record(self.output_dirs.get(name), name, counts)
        except Exception as exc:  # noqa: BLE001 - it is killed below either way
            _log.warning("server actor %r did not stop cleanly: %s", name, exc)
        finally:
            self._kill(name)

    def _unwatch(self) -> None:
        """Stop watching: from now on an actor's end is the stop, not a death."""
        for replica in self.replicas.values():
            if replica.watch is not None:
                replica.watch.cancel()

    def kill_now(self) -> None:
        """Kill whatever actor is left: the last resort, usable without a loop."""
        self._unwatch()
        for name in list(self.actors):
            self._kill(name)

    def _kill(self, name: str) -> None:
        actor = self.actors.pop(name, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)

    def close(self) -> None:
        """Disconnect from Ray (which stops a local Ray) if this placement initialised it."""
        self.kill_now()
        if self.started:
            self.started = False
            self.ray.shutdown()


async def _watch(replica: ActorReplica) -> None:
    """Wait for the replica's end; record how it ended unless it was stopped."""
    try:
        reason = await replica.actor.until_stopped.remote()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - RayActorError / ActorDiedError: it is gone
        replica.ended = f"its Ray actor died (pid {replica.pid}: {type(exc).__name__})"
        return
    if reason is not None:
        replica.ended = reason


def _bind_host(ray: ModuleType) -> str | None:
    """Loopback when every live node is this machine (a local Ray), else each actor's node IP."""
    try:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        here = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001
        return None
    if nodes and all(node.get("NodeManagerAddress") == here for node in nodes):
        return LOOPBACK
    return None


def _log_path(spec: ServeSpec) -> Path | None:
    """``<output_dir>/logs/<instance>.log``, where a local server's log is too (None: none)."""
    return Path(spec.output_dir) / "logs" / f"{spec.instance}.log" if spec.output_dir else None


def _failure(spec: ServeSpec, problem: str) -> LaunchError:
    """A LaunchError naming the server, quoting its log when this node can read it."""
    path = _log_path(spec)
    if path is not None:
        tail = log_tail(path)
        if tail:
            problem += f"; last lines of {path}:\n{tail}"
    return LaunchError(problem, server=spec.instance)
