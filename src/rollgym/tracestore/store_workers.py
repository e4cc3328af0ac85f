"""The store's worker processes: decoders turn request bodies into rows, one writer commits them.

Why processes: turning a request into rows (protobuf parse, the wire walk, one JSON text per
span) is pure Python work of about 8 µs a span, and inserting them costs about 7 µs more, most
of it SQLite's own B-tree work. In threads of the store process both shared one GIL with the
event loop (a writer thread's wall time per span was 3-5 times its CPU time). In worker
processes they run beside the loop and beside each other: decoding request *n+1* overlaps
committing request *n*, so the store's rate is set by the slower of the two stages, not by
their sum.

Why one writer: SQLite allows one writer at a time, and in WAL mode a connection drops its
whole page cache whenever another connection has committed. Two workers that each decoded
*and* committed (the previous design) took turns under a lock and started every transaction
with a cold cache (measured slower on 2 cores than one such worker). A single writer process
keeps its cache warm and needs no lock.

Between the stages a request's rows travel as one :mod:`marshal` blob (built in C: about
1.5 µs a span both ways, against about 8 to decode): the store process passes the blob from a
decoder to the writer without reading it. The writer answers with the span count only after
the COMMIT, so an HTTP 200 still means "committed"; a request is one transaction, so a batch is
never half-written.

Span records (what rollgym's own processes send) skip the decoders: reading them is a
``marshal.loads`` and a compiled loop, cheaper than the hop to a decoder and back, so the
writer reads them itself (the store path's CPU a span 17 vs 22 µs, ``bench/store_path_cpu.py``).
A records body that cannot be read is refused before the group's transaction, alone. The
decoder processes start with the first OTLP request (an engine's, a remote sender's), so a run
whose spans are all rollgym's own runs without them.

Workers need no shared state: a resource's row id is derived from its fingerprint
(:class:`rollgym.tracestore.store.ResourceRegistry`), so every decoder, and a store restarted on
the same file, gives the same resource the same id. A bad payload raises
:class:`~rollgym.tracestore.decode.PayloadError` in the decoder (in the writer, for records),
which reaches the receiver as itself (answered 400/413 before anything touches the database).
A worker that dies (killed, out of memory) breaks its pool: the request that saw it is answered
503, which exporters retry (SQLite discards a transaction its writer did not commit), and the
next request gets a fresh pool. Workers die with the store (``PR_SET_PDEATHSIG``), so a killed
store leaves none behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import apsw

from rollgym.child_process import die_with_parent
from rollgym.tracestore.decode import (
    PROTOBUF_MEDIA_TYPES,
    PayloadError,
    SpanBatch,
    media_type,
    parse_traces,
)
from rollgym.tracestore.native import rows_from_protobuf, rows_from_records, to_rows
from rollgym.tracestore.record_rows import RECORDS_TYPE
from rollgym.tracestore.store import ResourceRegistry, TraceStore

log = logging.getLogger(__name__)

#: Decoder processes by default: one per core beyond the first (the event loop and the writer
#: need the rest), at most 4.
DEFAULT_DECODERS = max(1, min(4, (os.cpu_count() or 2) - 1))


#: The writer's own checkpoint threshold, a backstop: normally the store process checkpoints
#: far sooner (:data:`rollgym.tracestore.writer.CHECKPOINT_EVERY_SPANS`).
WRITER_AUTOCHECKPOINT_PAGES = 25_000

#: Process names of the workers (``/proc/<pid>/comm``, what ``ps`` and ``top`` show).
DECODER_NAME, WRITER_NAME = "rollgym-decode", "rollgym-write"


class StoreFailed(RuntimeError):
    """A request's transaction failed and was rolled back (HTTP 503: the sender may retry)."""


class StoreFull(StoreFailed):
    """The disk under the store is full: nothing of the request was stored (HTTP 507, which
    the exporters do not retry: waiting for another writer to free the disk would hold every
    process of the run at its end for the whole flush limit)."""


#: How a worker's answer starts when its transaction failed because the disk is full.
_FULL = "FullError"
#: How the writer's answer starts for a records payload it could not read (HTTP 400).
_REFUSED = "PayloadError: "
#: What the writer gets of one request: (True, a span records body it reads itself, which
#: costs less than passing rows between processes) or (False, a decoder's packed rows).
Pending = tuple[bool, bytes]


class WorkerUnavailable(RuntimeError):
    """A worker process died under this request; the sender should retry (HTTP 503)."""


class _RespawningPool:
    """A process pool that replaces itself when one of its workers dies."""

    def __init__(self, name: str, workers: int, initializer: Callable[..., None], *args: object):
        self._name = name
        self._workers = max(1, workers)
        self._initializer = initializer
        self._args = args
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Create the pool and start its workers in the background (imports, connections)."""
        self._pool = self._new_pool()
        self._pool.submit(int)  # any call starts the workers

    async def call(self, function: Callable[..., object], *args: object) -> Any:
        """``function(*args)`` in a worker; the first call starts the pool if nothing did."""
        pool = self._pool
        if pool is None:
            pool = self._pool = self._new_pool()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, function, *args)
        except BrokenProcessPool as exc:
            if self._pool is pool:  # the first request to see it replaces the pool
                log.error("a trace store %s process died; starting new ones", self._name)
                self._pool = self._new_pool()
                pool.shutdown(wait=False, cancel_futures=True)
            raise WorkerUnavailable(f"{self._name} process died: {exc}") from None

    def close(self) -> None:
        """Let queued calls finish, then stop the workers. Blocking."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the store process has threads (the executor's), which fork would not carry.
        return ProcessPoolExecutor(
            self._workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=self._initializer,
            initargs=(os.getpid(), *self._args),
        )


class StoreWorkers:
    """Decoder processes and the one writer process of one store file.

    Group commit: while the writer commits one group of requests, the rows of requests decoded
    meanwhile wait here, and go to the writer together, as one transaction (at most
    ``max_group`` requests). A busy store so commits less often (measured: 6.4 -> 5.2 µs of
    writer CPU a span at 8 requests a transaction), an idle one commits each request at once.
    A group whose transaction fails is retried request by request, so one request that cannot
    be stored never costs the others.
    """

    def __init__(
        self, db_path: str | Path, decoders: int = DEFAULT_DECODERS, max_group: int = 16
    ) -> None:
        self._decoders = _RespawningPool("decoder", decoders, _init_decoder, str(db_path))
        self._writer = _RespawningPool("writer", 1, _init_writer, str(db_path))
        self._max_group = max(1, max_group)
        self._waiting: list[tuple[Pending, asyncio.Future[int]]] = []
        self._committing: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the writer in the background; the store file (its schema) must exist. The
        decoders start with the first OTLP request: a run whose spans all come from
        rollgym's own processes (span records, read by the writer) never needs them."""
        self._writer.start()

    async def warm(self) -> None:
        """Return once the writer has started (imports, the store opened): span records sent
        from now on are committed without waiting for a worker's start-up (the first OTLP
        request still waits for a decoder's)."""
        await self._writer.call(_started)

    async def store(self, body: bytes, content_type: str) -> int:
        """Decode and commit one request; its span count. Raises PayloadError for a bad one
        (nothing stored), StoreFailed when its transaction failed, WorkerUnavailable when a
        worker died under it. Span records skip the decoders: the writer reads them itself,
        which costs less than passing their rows from another process (measured in
        docs/design/store-writer.md)."""
        if media_type(content_type) == RECORDS_TYPE:
            pending: Pending = (True, body)  # read by the writer itself (see _read)
        else:
            pending = (False, await self._decoders.call(_decode, body, content_type))
        committed = asyncio.get_running_loop().create_future()
        self._waiting.append((pending, committed))
        if self._committing is None:
            self._committing = asyncio.create_task(self._commit_waiting())
        count: int = await committed
        return count

    async def _commit_waiting(self) -> None:
        """Hand the waiting requests to the writer, a group at a time, until none wait."""
        try:
            while self._waiting:
                group = self._waiting[: self._max_group]
                del self._waiting[: self._max_group]
                results: list[int | str]
                failure: type[Exception] = StoreFailed
                try:
                    results = await self._writer.call(_write_group, [p for p, _ in group])
                except Exception as exc:  # the writer died: every request of the group
                    if isinstance(exc, WorkerUnavailable):
                        failure = WorkerUnavailable
                    results = [str(exc)] * len(group)
                for (_, committed), result in zip(group, results, strict=True):
                    if committed.done():  # its sender went away; the rows are stored anyway
                        continue
                    if isinstance(result, int):
                        committed.set_result(result)
                    elif result.startswith(_REFUSED):
                        committed.set_exception(PayloadError(result[len(_REFUSED) :]))
                    elif result.startswith(_FULL):
                        committed.set_exception(StoreFull(result))
                    else:  # each waiting request gets an error of its own
                        committed.set_exception(failure(result))
        finally:
            self._committing = None

    def close(self) -> None:
        """Stop the workers once the calls already handed to them are done (the store stops
        taking requests first). Blocking."""
        self._decoders.close()
        self._writer.close()


# --- in the workers ---------------------------------------------------------------------------

_resources: ResourceRegistry | None = None
_store: TraceStore | None = None


def _become_worker(store_pid: int, name: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the store decides when workers stop
    with contextlib.suppress(OSError):  # Linux: ``ps``/``top`` (and the benches) tell them apart
        Path("/proc/self/comm").write_text(name)
    die = die_with_parent(signal.SIGKILL, parent=store_pid)
    if die is not None:
        die()


def _init_decoder(store_pid: int, db_path: str) -> None:
    global _resources
    _become_worker(store_pid, DECODER_NAME)
    # The resources already stored keep their ids (a store written before ids came from
    # content); read once, then the connection is not needed.
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        _resources = ResourceRegistry(conn)
    finally:
        conn.close()


def _init_writer(store_pid: int, db_path: str) -> None:
    global _store
    _become_worker(store_pid, WRITER_NAME)
    # Checkpoints are the store process's (BatchWriter), on the other core; this one only
    # checkpoints as a backstop, should those stop.
    _store = TraceStore(db_path, autocheckpoint_pages=WRITER_AUTOCHECKPOINT_PAGES)


def _started() -> bool:
    """Called in a worker once its initializer ran: it is ready for requests."""
    return True


def _decode(body: bytes, content_type: str) -> bytes:
    """One request's rows, packed for the writer (PayloadError for a bad payload)."""
    assert _resources is not None
    mime = media_type(content_type)
    if mime in PROTOBUF_MEDIA_TYPES:
        batch = rows_from_protobuf(body, _resources)
    elif mime == RECORDS_TYPE:  # the run's own exporter children: no OTLP in between
        batch = rows_from_records(body, _resources)
    else:
        batch = to_rows(parse_traces(body, content_type), _resources)
    return marshal.dumps((batch.resources, batch.spans, batch.links, batch.dispatches))


def _write_group(group: list[Pending]) -> list[int | str]:
    """Commit a group of requests' rows; per request its span count (after the COMMIT), or
    why its transaction failed. One transaction for the group; if that fails, one per request,
    so only the request that cannot be stored fails."""
    assert _store is not None
    read = [_read(records, payload) for records, payload in group]
    batches = [batch for batch in read if isinstance(batch, SpanBatch)]
    if len(batches) > 1 and len(batches) == len(read):
        try:
            _store.write_batches(batches)
            return [len(batch.spans) for batch in batches]
        except Exception:  # rolled back: one of them cannot be stored; find which, below
            pass
    return [_write_alone(batch) if isinstance(batch, SpanBatch) else batch for batch in read]


def _read(records: bool, payload: bytes) -> SpanBatch | str:
    """A request's rows: a decoder's packed rows, or span records read here; a records
    payload that cannot be read is refused (its reason, marked) before any transaction."""
    if not records:
        return _unpack(payload)
    assert _store is not None
    try:
        batch: SpanBatch = rows_from_records(payload, _store.resources)
    except PayloadError as exc:
        return _REFUSED + str(exc)
    return batch


def _write_alone(batch: SpanBatch) -> int | str:
    assert _store is not None
    try:
        _store.write_batches([batch])
    except Exception as exc:  # rolled back; the reason crosses back to the receiver (503)
        return f"{type(exc).__name__}: {exc}"
    return len(batch.spans)


def _unpack(packed: bytes) -> SpanBatch:
    resources, spans, links, dispatches = marshal.loads(packed)
    return SpanBatch(spans=spans, resources=resources, links=links, dispatches=dispatches)
