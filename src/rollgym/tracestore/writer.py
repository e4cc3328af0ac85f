"""The store's writer thread: inserts off the event loop, one transaction per request.

Why a thread: SQLite writes are blocking work; on the event loop they would stall every other
exporter's connection. Decoding happens before (in worker threads: ``decode_rows``), so a bad
payload is answered 400 without touching the queue, and decoding of the next request overlaps
with SQLite's insert of the previous one (sqlite3 releases the GIL while it steps). The loop
hands each decoded batch to this thread and awaits a future that resolves only after the
batch's transaction has COMMITTED, so
an HTTP 200 from the receiver means "durably accepted" (WAL with ``synchronous=NORMAL``: survives
a crash of the process, not necessarily a power loss). Back-pressure: at most ``max_pending``
requests wait; further senders wait on a semaphore in the loop (they are not rejected).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path

from rollgym.tracestore.decode import SpanBatch, parse_traces, to_rows
from rollgym.tracestore.store import ResourceRegistry, TraceStore

log = logging.getLogger(__name__)
_GROUP = 16  # at most this many queued requests share one COMMIT (each under a SAVEPOINT)


@dataclass(frozen=True)
class _Job:
    batch: SpanBatch
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


class BatchWriter:
    """Owns the TraceStore; accepts decoded-later request bodies from the event loop."""

    def __init__(self, db_path: str | Path, *, max_pending: int = 64) -> None:
        self._db_path = Path(db_path)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._slots = asyncio.Semaphore(max_pending)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._resources: ResourceRegistry | None = None
        self._thread = threading.Thread(target=self._run, name="tracestore-writer", daemon=True)
        self.spans_written = 0

    def start(self) -> None:
        """Start the thread and wait until the database is open (errors surface here)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def decode_rows(self, body: bytes, content_type: str) -> SpanBatch:
        """Payload -> rows (thread-safe; raises PayloadError). Run it in a worker thread."""
        assert self._resources is not None, "start() first"
        return to_rows(parse_traces(body, content_type), self._resources)

    async def submit(self, batch: SpanBatch) -> int:
        """Store one decoded request atomically; returns its span count once committed."""
        async with self._slots:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[int] = loop.create_future()
            self._queue.put(_Job(batch, future, loop))
            return await asyncio.shield(future)

    def close(self) -> None:
        """Finish every queued request, then close (checkpoint) the store. Blocking."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    # --- thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            store = TraceStore(self._db_path)
            self._resources = store.resources
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            stopping = False
            while not stopping:
                jobs = [self._queue.get()]
                while len(jobs) < _GROUP and not self._queue.empty():
                    jobs.append(self._queue.get())  # what queued meanwhile joins this commit
                if jobs[-1] is None:
                    stopping = True
                    jobs.pop()
                self._write([job for job in jobs if job is not None], store)
        finally:
            store.close()

    def _write(self, jobs: list[_Job], store: TraceStore) -> None:
        if not jobs:
            return
        errors = store.write_batches([job.batch for job in jobs])
        for job, error in zip(jobs, errors, strict=True):
            count = len(job.batch.spans)
            if error is None:
                self.spans_written += count
            else:  # answered 503 to the sender; the store stays as it was
                log.error("batch of %d spans not stored: %s", count, error)
            job.loop.call_soon_threadsafe(_settle, job.future, count, error)


def _settle(future: asyncio.Future[int], result: int | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result or 0)
