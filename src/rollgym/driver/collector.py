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
from typing import TYPE_CHECKING, Any

from rollgym.driver.admission import SharedSource, WorkerPool
from rollgym.driver.dispatch import Dispatcher, Rotation
from rollgym.driver.outcomes import Outcome, RolloutFailure
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
from rollgym.driver.unique_ids import UniqueIds
from rollgym.http.client import HttpClient, PoolMetrics
from rollgym.http.limits import (
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    ExchangeLimits,
)
from rollgym.open_files import raise_open_files_limit
from rollgym.telemetry.embedder import CallerTracing
from rollgym.trajectory.record import Capture

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
    """

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        agent: str | None = None,
        environment_routes: Mapping[str, str] | None = None,
        concurrency: int = 64,
        max_attempts: int = 3,
        timeout_s: float = 300.0,
        retry_backoff_s: float = 0.5,
        retry_backoff_max_s: float = 30.0,
        repeats: int = 1,
        agents: Collection[str] | None = None,
        metrics: RolloutMetrics | None = None,
        http_metrics: PoolMetrics | None = None,
        span_groups: str | Iterable[str] = "default",
        trajectories: bool = False,
        capture_tokens: bool = False,
        rotation: Rotation | None = None,
        replicas: Mapping[str, list[str]] | None = None,
        max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if concurrency < 1 or repeats < 1 or max_attempts < 1:
            raise ValueError("concurrency, repeats and max_attempts must be at least 1")
        routes = dict(environment_routes or {})
        for taskset, name in routes.items():
            if name not in servers:
                raise ValueError(f"environment_routes[{taskset!r}] names {name!r}, not in servers")
        if agent is not None and agent not in servers:
            raise ValueError(f"agent {agent!r} is not in servers ({sorted(servers)})")
        agent_names = set(servers) - set(routes.values()) if agents is None else set(agents)
        self.router = Router(agents=agent_names, environment_routes=routes, default_agent=agent)
        self.repeats = repeats
        self.concurrency = concurrency
        self.policy = RetryPolicy(max_attempts, retry_backoff_s, retry_backoff_max_s)
        self.in_flight = InFlight()
        self._urls = dict(servers)
        self._capture: Capture = "tokens" if capture_tokens else "turns" if trajectories else "off"
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._http_metrics = http_metrics
        self._rotation = rotation
        #: ``{server: [replica URLs]}``: the client balances over them (``servers`` names the first).
        self._replicas = dict(replicas or {})
        #: A row over the request limit is refused unsent; an answer past the other while read.
        self._limits = ExchangeLimits(max_request_bytes, max_response_bytes)
        self._client: HttpClient | None = None
        self._pool: WorkerPool[WorkItem] | None = None
        self._caller_tracing = CallerTracing(span_groups)

    async def __aenter__(self) -> Collector:
        """Open the connection pool (outside any span: it outlives every rollout).

        Also opens the span gate onto the embedder's own recording tracer provider, if one is
        installed and rollgym's own telemetry is not set up in this process.
        """
        raise_open_files_limit(2 * self.concurrency + 512)
        self._caller_tracing.start()
        self._client = HttpClient(
            limit=self.concurrency,
            metrics=self._http_metrics,
            replicas=self._replicas,
            limits=self._limits,
        )
        await self._client.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
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

    def interrupt(self) -> None:
        """Stop admitting and cancel what is in flight; each becomes a ``cancelled`` failure."""
        if self._pool is not None:
            self._pool.cancel()

    def stream(
        self, rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
    ) -> AsyncIterator[Outcome]:
        """Run ``repeats`` rollouts of each row; yield each record as it finishes."""
        return self.stream_entries(self._entries(rows))

    async def run(
        self,
        rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
        on_outcome: Callable[[Outcome], object],
    ) -> None:
        """Like :meth:`stream`, handing each record to ``on_outcome`` as it finishes.

        The callback form skips the hand-over to a consumer task, so it is the cheaper one when
        the consumer does not need to await (writing a line, counting): the CLI job uses it.
        """
        await self.run_entries(self._entries(rows), on_outcome)

    def _entries(self, rows: Any) -> Iterator[TaskRow | BadLine] | AsyncIterator[TaskRow | BadLine]:
        if isinstance(rows, AsyncIterable):
            return aread_mappings(rows, self.router, ids=self.unique_ids())
        return read_mappings(rows, self.router, ids=self.unique_ids())

    def unique_ids(self) -> UniqueIds:
        """A fresh explicit-id check for one stream of rows (repeats and retries included)."""
        return UniqueIds(self.repeats, self.policy.max_attempts)

    def _items(
        self, entries: Any, skip: Skip | None
    ) -> Iterator[WorkItem] | AsyncIterator[WorkItem]:
        if isinstance(entries, Iterator):
            return _expand_sync(entries, self.repeats, skip)
        return _expand_async(entries, self.repeats, skip)

    def _worker_body(
        self, deliver: Callable[[Outcome], object], room: asyncio.Semaphore | None
    ) -> Callable[[WorkItem], Awaitable[None]]:
        """What each worker does with one item: run it (retries included) and deliver the record.

        ``room`` (the stream form) bounds records waiting for a slow consumer.
        """
        send = Dispatcher(
            self.client, self._urls, self._timeout_s, self._capture, self._rotation
        ).send_attempt
        policy, in_flight, metrics = self.policy, self.in_flight, self._metrics

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
                deliver(await run_rollout(item, send, policy, in_flight, deliver, metrics))

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
    ) -> AsyncIterator[Outcome]:
        """The engine behind :meth:`stream`: entries in, records out as an async iterator."""
        outcomes: asyncio.Queue[Any] = asyncio.Queue()
        room = asyncio.Semaphore(2 * self.concurrency)
        put = outcomes.put_nowait
        pool = self._start_pool(entries, skip, self._worker_body(put, room), lambda: put(_DONE))
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
    ) -> WorkerPool[WorkItem]:
        """Start ``concurrency`` workers on the entries; :meth:`interrupt` reaches them."""
        pool = WorkerPool(SharedSource(self._items(entries, skip)), work, self.concurrency, on_idle)
        self._pool = pool
        pool.start()
        return pool

    async def _end_pool(self, pool: WorkerPool[WorkItem]) -> None:
        """Cancel workers still running (the caller was cancelled or stopped consuming)."""
        if pool.alive:
            pool.cancel()
            await asyncio.gather(pool.join(), return_exceptions=True)
        self._pool = None
