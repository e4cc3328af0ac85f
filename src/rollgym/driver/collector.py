"""The library API: collect rollouts inside the caller's own event loop.

A trainer that already runs its servers (or reaches them by URL) uses :class:`Collector`
directly; no CLI, no output directory, no server launch::

    async with Collector({"solver": "http://127.0.0.1:8001"}, agent="solver") as collector:
        async for outcome in collector.stream(rows):
            ...  # RolloutResult | RolloutFailure, in the order they finish

``rollgym run`` is this same Collector plus server launch, output files and the summary, so
the two share one code path: rows -> admission -> retry -> dispatch. Called inside an
embedder's span, each dispatch span nests under it (see TELEMETRY.md, the split rule).

A trainer that set its own recording global tracer provider needs nothing more: while the
Collector is open it traces into that provider (``span_groups`` chooses which of the driver's
spans exist), and it never replaces or shuts that provider down.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from typing import TYPE_CHECKING, Any, Literal

from rollgym.config.collector_options import DEFAULTS, CollectorOptions
from rollgym.driver.admission import SharedSource, WorkerPool
from rollgym.driver.dispatch import Dispatcher, Rotation
from rollgym.driver.dispatch_window import DispatchWindows
from rollgym.driver.groups import GroupBuffer
from rollgym.driver.outcomes import Outcome, RolloutFailure
from rollgym.driver.policy_clock import PolicyClock
from rollgym.driver.retry import InFlight, RetryPolicy, cancelled_failure, run_rollout
from rollgym.driver.rows import (
    BadLine,
    Router,
    Skip,
    TaskRow,
    WorkItem,
    aread_mappings,
    expand,
    read_mappings,
)
from rollgym.driver.stall_relief import StallRelief
from rollgym.driver.unique_ids import UniqueIds
from rollgym.driver.version_push import VersionPush
from rollgym.driver.weight_probe import Probe, ProbeGap, ProbeLog, check
from rollgym.http.client import HttpClient, PoolMetrics
from rollgym.http.limits import ExchangeLimits
from rollgym.open_files import raise_open_files_limit
from rollgym.policy_versions import PolicyVersion, is_version
from rollgym.telemetry.embedder import CallerTracing
from rollgym.trajectory.record import Capture
from rollgym.urls import http_url_problem, redact_url

if TYPE_CHECKING:
    from rollgym.telemetry.metrics import RolloutMetrics

_DONE = object()


async def _expand_async(
    entries: AsyncIterator[TaskRow | BadLine], repeats: int, skip: Skip | None
) -> AsyncIterator[WorkItem]:
    async for entry in entries:
        for item in expand(entry, repeats, skip):
            yield item


def _expand_sync(
    entries: Iterator[TaskRow | BadLine], repeats: int, skip: Skip | None
) -> Iterator[WorkItem]:
    for entry in entries:
        yield from expand(entry, repeats, skip)


class Collector:
    """Runs rollouts against running servers with bounded concurrency, retries and identity.

    ``servers`` maps server name -> base URL. With ``trajectories`` (or ``capture_tokens``,
    which adds the engine's token ids and log-probabilities) each :class:`RolloutResult`
    carries the rollout's trajectory. Rows go to the agent their ``agent`` field
    names, else to the ``agent`` given here; rows of a materialized task set
    (``task_id: {taskset, task_id}``) whose task set is in ``environment_routes`` go to that
    environment server's episode ``/run``.

    ``span_groups`` (a preset name or a list of groups, as ``telemetry.preset``) chooses the
    driver's spans when the Collector traces into the embedder's own provider; it is ignored
    where rollgym's own telemetry is set up (``rollgym run`` uses its config).

    ``rotation`` (the CLI job's server supervisor) holds back attempts for a server that is
    restarting. ``max_request_bytes`` / ``max_response_bytes`` bound what one attempt sends and
    what its answer may weigh (``run.max_request_bytes``, ``run.max_response_bytes``); ``None``
    is no limit.

    ``policy_version`` (docs/policy-versions.md) is the trainer's current policy version; set
    it again at any time (``collector.policy_version = step``, or ``await
    collector.set_policy_version(step)`` to wait until every model server has it). Every
    rollout dispatched after it is set carries it to its agent, whose model calls are stamped
    with it or a newer one (never older, never none), however late the model servers hear of
    it; it is also sent to the ``model_servers`` (name -> base URL; their replicas too). ``max_staleness=N``: no result is handed over whose oldest model call is
    more than N versions behind the current one; such a rollout is run again (a new attempt)
    while attempts remain, else it is a ``stale`` failure.

    The settings may come as one typed value instead, ``options=``
    :class:`~rollgym.config.collector_options.CollectorOptions` (what ``RunConfig.collector_options()``
    builds from a job config); then none of the keywords it holds may be given too. Either way
    the value is :attr:`options`.

    ``incomplete_model_calls`` (``run.incomplete_model_calls``): a result with a model answer
    that was not whole (a cut stream, no finish reason) is run again while attempts remain,
    then an ``incomplete_model_call`` failure (``retry``, the default), or kept, its turn
    flagged (``accept``).

    ``adaptive_window`` (``run.adaptive_window``) sends each server only as many attempts at
    once as it answers in good time, the rest waiting unsent with their time limit not yet
    started (:mod:`rollgym.driver.dispatch_window`); False sends all ``concurrency`` at once.
    """

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        agent: str | None = DEFAULTS.agent,
        environment_routes: Mapping[str, str] | None = DEFAULTS.environment_routes,
        concurrency: int = DEFAULTS.concurrency,
        max_attempts: int = DEFAULTS.max_attempts,
        timeout_s: float = DEFAULTS.timeout_s,
        retry_backoff_s: float = DEFAULTS.retry_backoff_s,
        retry_backoff_max_s: float = DEFAULTS.retry_backoff_max_s,
        repeats: int = DEFAULTS.repeats,
        agents: Collection[str] | None = None,
        metrics: RolloutMetrics | None = None,
        http_metrics: PoolMetrics | None = None,
        span_groups: str | Iterable[str] = "default",
        trajectories: bool = DEFAULTS.trajectories,
        capture_tokens: bool = DEFAULTS.capture_tokens,
        rotation: Rotation | None = None,
        replicas: Mapping[str, list[str]] | None = None,
        max_request_bytes: int | None = DEFAULTS.max_request_bytes,
        max_response_bytes: int | None = DEFAULTS.max_response_bytes,
        policy_version: PolicyVersion | None = None,
        max_staleness: int | None = DEFAULTS.max_staleness,
        model_servers: Mapping[str, str] | None = None,
        adaptive_window: bool = DEFAULTS.adaptive_window,
        incomplete_model_calls: Literal["retry", "accept"] = DEFAULTS.incomplete_model_calls,
        options: CollectorOptions | None = None,
    ) -> None:
        if policy_version is not None and not is_version(policy_version):
            raise ValueError(f"policy_version must be an int or a label, got {policy_version!r}")
        given = CollectorOptions(
            agent=agent,
            environment_routes=environment_routes,
            concurrency=concurrency,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            retry_backoff_s=retry_backoff_s,
            retry_backoff_max_s=retry_backoff_max_s,
            repeats=repeats,
            trajectories=trajectories,
            capture_tokens=capture_tokens,
            max_request_bytes=max_request_bytes,
            max_response_bytes=max_response_bytes,
            max_staleness=max_staleness,
            adaptive_window=adaptive_window,
            incomplete_model_calls=incomplete_model_calls,
        )
        if options is None:
            options = given
        elif given != DEFAULTS:
            raise TypeError("give the Collector's settings either as options= or as keywords")
        self.options = options
        self._configure(servers, options, agents)
        self._metrics = metrics
        self._http_metrics = http_metrics
        self._rotation = rotation
        #: ``{server: [replica URLs]}``: the client balances over them (``servers`` names the first).
        self._replicas = dict(replicas or {})
        self._client: HttpClient | None = None
        self._pool: WorkerPool[WorkItem] | None = None
        #: Per running pool, the watch that keeps a silent server from holding all of it.
        self._reliefs: dict[WorkerPool[WorkItem], StallRelief] = {}
        self._caller_tracing = CallerTracing(span_groups)
        #: The current policy version and the staleness bound (both may stay unset).
        self._clock = PolicyClock(policy_version, options.max_staleness)
        self._push = VersionPush(
            {name: self._replicas.get(name) or [url] for name, url in (model_servers or {}).items()}
        )
        self._probes = ProbeLog()

    def _configure(
        self, servers: Mapping[str, str], options: CollectorOptions, agents: Collection[str] | None
    ) -> None:
        """Check the routing against ``servers`` and set up what ``options`` asks for."""
        agent, concurrency, repeats = options.agent, options.concurrency, options.repeats
        max_attempts = options.max_attempts
        if concurrency < 1 or repeats < 1 or max_attempts < 1:
            raise ValueError("concurrency, repeats and max_attempts must be at least 1")
        if not options.timeout_s > 0:  # nan included
            raise ValueError(f"timeout_s must be above 0, got {options.timeout_s!r}")
        if not (options.retry_backoff_s >= 0 and options.retry_backoff_max_s >= 0):
            raise ValueError("retry_backoff_s and retry_backoff_max_s must be at least 0")
        for name, url in servers.items():
            problem = http_url_problem(url) if isinstance(url, str) else "not a string"
            if problem is not None:
                shown = redact_url(url) if isinstance(url, str) else url
                raise ValueError(f"servers[{name!r}]: {shown!r} is not an http(s) URL: {problem}")
        routes = dict(options.environment_routes or {})
        for taskset, name in routes.items():
            if name not in servers:
                raise ValueError(f"environment_routes[{taskset!r}] names {name!r}, not in servers")
        if agent is not None and agent not in servers:
            raise ValueError(f"agent {agent!r} is not in servers ({sorted(servers)})")
        agent_names = set(servers) - set(routes.values()) if agents is None else set(agents)
        self.router = Router(agents=agent_names, environment_routes=routes, default_agent=agent)
        self.repeats = repeats
        self.concurrency = concurrency
        self.policy = RetryPolicy(
            max_attempts,
            options.retry_backoff_s,
            options.retry_backoff_max_s,
            retry_incomplete=options.incomplete_model_calls == "retry",
        )
        self.in_flight = InFlight()
        #: The dispatch windows of the stream running now (None: none yet, or the window off).
        self.dispatch_windows: DispatchWindows | None = None
        self._urls = dict(servers)
        self._capture: Capture = (
            "tokens" if options.capture_tokens else "turns" if options.trajectories else "off"
        )
        self._timeout_s = options.timeout_s
        self._adaptive_window = options.adaptive_window
        #: A row over the request limit is refused unsent; an answer past the other while read.
        self._limits = ExchangeLimits(options.max_request_bytes, options.max_response_bytes)

    async def __aenter__(self) -> Collector:
        """Open the connection pool (outside any span: it outlives every rollout).

        Also opens the span gate onto the embedder's own recording tracer provider, if one is
        installed and rollgym's own telemetry is not set up in this process.
        """
        # up to ``concurrency`` spare rollouts beside the attempts stuck on a silent server
        # (rollgym.driver.stall_relief): each holds a connection of its own
        raise_open_files_limit(4 * self.concurrency + 512)
        self._caller_tracing.start()
        self._client = HttpClient(
            limit=2 * self.concurrency,
            metrics=self._http_metrics,
            replicas=self._replicas,
            limits=self._limits,
        )
        await self._client.start()
        if self._clock.current is not None:
            try:
                await self._push.send(self._client, self._clock.current, self._clock.set_ns)
            except BaseException:
                await self.__aexit__(None, None, None)
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._push.drain()
            if self._client is not None:
                await self._client.close()
                self._client = None
        finally:
            self._caller_tracing.stop()

    @property
    def client(self) -> HttpClient:
        """The one outgoing client (the job also posts ``/aggregate_metrics`` with it)."""
        if self._client is None:
            raise RuntimeError("use the Collector inside 'async with'")
        return self._client

    @property
    def policy_version(self) -> PolicyVersion | None:
        """The current policy version (None until one is set)."""
        return self._clock.current

    @policy_version.setter
    def policy_version(self, version: PolicyVersion) -> None:
        """Set the version now: every rollout dispatched from here on carries it as the floor
        of its model calls; the model servers also hear of it in the background."""
        self._set_version(version)
        if self._client is not None:
            self._push.start(self._client, version, self._clock.set_ns)

    async def set_policy_version(
        self,
        version: PolicyVersion,
        *,
        weights: str | os.PathLike[str] | None = None,
        probe: Probe | None = None,
    ) -> None:
        """Set the version (a floor from here on, as the setter) and wait until every model
        server has it (a failed send raises).

        With ``weights`` (the checkpoint the trainer wrote for ``version``) every model server
        replica loads it first, letting its calls in flight finish under the old weights and
        stamp; only once all have loaded it does ``version`` become the floor of what is
        dispatched next. A replica that cannot load it raises ``ServerCallError`` naming it
        and why, and the driver's version stays what it was (that replica serves its old
        weights). With ``probe`` each replica's engine is then asked for its log-probabilities
        of the probe's tokens and the gap to the trainer's is recorded (:attr:`probe_gaps`;
        a gap over the probe's bound is a warning). docs/policy-versions.md.
        """
        if weights is None:
            self._set_version(version)
            await self._push.send(self.client, version, self._clock.set_ns)
        else:
            if not is_version(version):
                raise ValueError(f"policy_version must be an int or a label, got {version!r}")
            path = os.path.abspath(os.fspath(weights))
            set_ns = max(time.time_ns(), self._clock.set_ns + 1)
            await self._push.send(self.client, version, set_ns, weights=path)
            self._set_version(version)
        if probe is not None:
            found = await check(self.client, self._push.replicas(), version, probe)
            self._probes.gaps.extend(found)

    @property
    def probe_gaps(self) -> list[ProbeGap]:
        """Every weight probe's gap so far, per version and replica, in the order checked."""
        return self._probes.gaps

    @property
    def probes(self) -> ProbeLog:
        """The weight probes' record (``summary.json``'s ``probes`` and its warnings)."""
        return self._probes

    def _set_version(self, version: PolicyVersion) -> None:
        if not is_version(version):
            raise ValueError(f"policy_version must be an int or a label, got {version!r}")
        self._clock.set(version)

    @property
    def max_staleness(self) -> int | None:
        return self._clock.max_staleness

    def interrupt(self) -> None:
        """Stop admitting and cancel what is in flight; each becomes a ``cancelled`` failure."""
        if self._pool is not None:
            self._pool.cancel()

    def stream(
        self, rows: Iterable[Mapping[str, object]] | AsyncIterable[Mapping[str, object]]
    ) -> AsyncIterator[Outcome]:
        """Run ``repeats`` rollouts of each row; yield each record as it finishes."""
        return self.stream_entries(self._entries(rows))

    async def groups(
        self,
        rows: Iterable[Mapping[str, object]] | AsyncIterable[Mapping[str, object]],
        size: int | None = None,
        finished: Iterable[Outcome] = (),
    ) -> AsyncIterator[list[Outcome]]:
        """Run ``size`` rollouts of each row (default ``repeats``); yield each task's whole
        group, ordered by rollout index, as soon as its last rollout is done.

        Failures are members like results (a group is never held back or dropped for one).
        ``finished``: outcomes of an earlier session (a resume): they are not run again and
        join their groups; groups already whole among them come out first. Groups still short
        when the stream ends (:meth:`interrupt`) come out last, as they are.
        """
        buffer = GroupBuffer(size or self.repeats, finished)
        for group in buffer.whole_at_start():
            yield group
        skip = buffer.skip if buffer.finished else None
        entries = self._entries(rows, buffer.size)
        async for outcome in self.stream_entries(entries, skip, buffer.size):
            whole = buffer.add(outcome)
            if whole is not None:
                yield whole
        for rest in buffer.leftovers():
            yield rest

    async def run(
        self,
        rows: Iterable[Mapping[str, object]] | AsyncIterable[Mapping[str, object]],
        on_outcome: Callable[[Outcome], object],
    ) -> None:
        """Like :meth:`stream`, handing each record to ``on_outcome`` as it finishes.

        The callback form skips the hand-over to a consumer task, so it is the cheaper one when
        the consumer does not need to await (writing a line, counting): the CLI job uses it.
        """
        await self.run_entries(self._entries(rows), on_outcome)

    def _entries(
        self,
        rows: Iterable[Mapping[str, object]] | AsyncIterable[Mapping[str, object]],
        repeats: int | None = None,
    ) -> Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine]:
        ids = self.unique_ids(repeats)
        if isinstance(rows, AsyncIterable):
            return aread_mappings(rows, self.router, ids=ids)
        return read_mappings(rows, self.router, ids=ids)

    def unique_ids(self, repeats: int | None = None) -> UniqueIds:
        """A fresh explicit-id check for one stream of rows (repeats and retries included)."""
        return UniqueIds(repeats or self.repeats, self.policy.max_attempts)

    def _items(
        self,
        entries: Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine],
        skip: Skip | None,
        repeats: int,
    ) -> Iterator[WorkItem] | AsyncIterator[WorkItem]:
        if isinstance(entries, Iterator):
            return _expand_sync(entries, repeats, skip)
        return _expand_async(entries, repeats, skip)

    def _worker_body(
        self, deliver: Callable[[Outcome], object], room: asyncio.Semaphore | None
    ) -> Callable[[WorkItem], Awaitable[None]]:
        """What each worker does with one item: run it (retries included) and deliver the record.

        ``room`` (the stream form) bounds records waiting for a slow consumer.
        """
        windows = (
            DispatchWindows(self.concurrency, self._timeout_s) if self._adaptive_window else None
        )
        self.dispatch_windows = windows
        send = Dispatcher(
            self.client,
            self._urls,
            self._timeout_s,
            self._capture,
            self._rotation,
            self._clock,
            windows,
        ).send_attempt
        policy, in_flight, metrics = self.policy, self.in_flight, self._metrics
        clock = self._clock

        async def work(item: WorkItem) -> None:
            if room is not None:
                try:
                    await room.acquire()
                except asyncio.CancelledError:
                    if not isinstance(item, RolloutFailure):
                        deliver(cancelled_failure(item, 0))
                    raise
            if isinstance(item, RolloutFailure):
                deliver(item)
            else:
                deliver(await run_rollout(item, send, policy, in_flight, deliver, metrics, clock))

        return work

    async def run_entries(
        self,
        entries: Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine],
        on_outcome: Callable[[Outcome], object],
        skip: Skip | None = None,
    ) -> None:
        """The engine of the CLI job: entries in, each record to ``on_outcome``.

        ``skip(task_index, rollout_index)`` drops rollouts finished in an earlier session.
        """
        idle = asyncio.Event()
        pool = self._start_pool(entries, skip, self._worker_body(on_outcome, None), idle.set)
        try:
            await idle.wait()
            await pool.join()
        finally:
            await self._end_pool(pool)

    async def stream_entries(
        self,
        entries: Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine],
        skip: Skip | None = None,
        repeats: int | None = None,
    ) -> AsyncIterator[Outcome]:
        """The engine behind :meth:`stream`: entries in, records out as an async iterator."""
        outcomes: asyncio.Queue[Any] = asyncio.Queue()
        room = asyncio.Semaphore(2 * self.concurrency)
        put = outcomes.put_nowait
        work = self._worker_body(put, room)
        pool = self._start_pool(entries, skip, work, lambda: put(_DONE), repeats)
        try:
            while True:
                outcome = await outcomes.get()
                if outcome is _DONE:
                    break
                room.release()
                yield outcome
            await pool.join()
        finally:
            await self._end_pool(pool)

    def _start_pool(
        self,
        entries: Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine],
        skip: Skip | None,
        work: Callable[[WorkItem], Awaitable[None]],
        on_idle: Callable[[], None],
        repeats: int | None = None,
    ) -> WorkerPool[WorkItem]:
        """Start ``concurrency`` workers on the entries; :meth:`interrupt` reaches them."""
        previous = self._pool
        if previous is not None and previous.alive:
            # an abandoned stream whose generator is not closed yet (a ``break`` out of
            # ``groups()``, then a resume): its rollouts end before this one's start, never
            # beside them under the same ids
            previous.cancel()
        items = self._items(entries, skip, repeats or self.repeats)
        windows = self.dispatch_windows
        relief = None
        if windows is not None:
            relief = StallRelief(
                windows, self.concurrency, self._timeout_s, lambda n: pool.set_spare(n)
            )
        pool = WorkerPool(SharedSource(items), work, self.concurrency, on_idle, relief)
        self._pool = pool
        pool.start()
        if relief is not None:
            self._reliefs[pool] = relief
            relief.start()
        return pool

    async def _end_pool(self, pool: WorkerPool[WorkItem]) -> None:
        """Cancel workers still running (the caller was cancelled or stopped consuming)."""
        if pool.alive:
            pool.cancel()
        relief = self._reliefs.pop(pool, None)
        if relief is not None:
            await relief.stop()
        if pool.alive:
            await asyncio.gather(pool.join(), return_exceptions=True)
        if self._pool is pool:
            self._pool = None
