"""The store's writer thread: inserts off the event loop, one transaction per request.

Why a thread: SQLite writes are blocking work; on the event loop they would stall every other
exporter's connection. Decoding happens before, in worker processes
(:mod:`rollgym.tracestore.decode_pool`), so a bad payload is answered 400 without touching the
queue, and decoding of the next requests runs beside SQLite's insert of the previous ones on
other cores. The loop hands each packed batch to this thread (which unpacks it right before
the insert) and awaits a future that resolves only after the
batch's transaction has COMMITTED, so
an HTTP 200 from the receiver means "durably accepted" (WAL with ``synchronous=NORMAL``: survives
a crash of the process, not necessarily a power loss). Back-pressure: at most ``max_pending``
requests are being decoded or wait for the writer; further senders wait on a semaphore in the
loop (they are not rejected), which bounds the store's memory.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path

from rollgym.tracestore.decode_pool import DEFAULT_WORKERS, DecodePool, unpack
from rollgym.tracestore.store import TraceStore

log = logging.getLogger(__name__)
_GROUP = 16  # at most this many queued requests share one COMMIT (each under a SAVEPOINT)


@dataclass(frozen=True)
class _Job:
    packed: bytes
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


class BatchWriter:
    """Owns the TraceStore and its decode workers; stores request bodies from the event loop."""

    def __init__(
        self, db_path: str | Path, *, max_pending: int = 64, decode_workers: int = DEFAULT_WORKERS
    ) -> None:
        self._db_path = Path(db_path)
        self._decoder = DecodePool(self._db_path, decode_workers)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._slots = asyncio.Semaphore(max_pending)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tracestore-writer", daemon=True)
        self.spans_written = 0

    def start(self) -> None:
        """Start the thread and wait until the database is open (errors surface here)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        self._decoder.start()

    async def store(self, body: bytes, content_type: str) -> int:
        """Decode and store one OTLP request atomically; its span count once committed.

        Raises PayloadError (nothing stored) for a bad payload, DecoderUnavailable when a
        decode worker died under it, and the store's error when its transaction failed.
        """
        async with self._slots:
            packed = await self._decoder.decode(body, content_type)
            loop = asyncio.get_running_loop()
            future: asyncio.Future[int] = loop.create_future()
            self._queue.put(_Job(packed, future, loop))
            return await asyncio.shield(future)

    def close(self) -> None:
        """Finish every queued request, then close (checkpoint) the store. Blocking."""
        self._decoder.close()
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    # --- thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            store = TraceStore(self._db_path)
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
        batches = [unpack(job.packed) for job in jobs]
        errors = store.write_batches(batches)
        for job, batch, error in zip(jobs, batches, errors, strict=True):
            count = len(batch.spans)
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
