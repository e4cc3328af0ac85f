"""The store's write path: bounded concurrency in the event loop, writes in worker processes.

Each request body goes to a decoder process of :mod:`rollgym.tracestore.store_workers`, its
rows to the store's one writer process, which commits them (with other requests waiting at
that moment: group commit) and answers with the span counts; only then does the receiver
answer 200, so an HTTP 200 means "durably accepted" (WAL with ``synchronous=NORMAL``: survives
a crash of the process, not necessarily a power loss). Back-pressure: at most ``max_pending``
requests are being stored; further senders wait on a semaphore in the loop (they are not
rejected), which bounds the store's memory.

This process keeps one connection of its own: it creates the schema before the workers start,
checkpoints the WAL into the main file as it grows (in a thread, so on another core than the
writer's inserts: measured, a checkpoint done by the writer's own commits cost it about 1 µs a
span), and checkpoints it fully when the store closes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from rollgym.tracestore.store import TraceStore
from rollgym.tracestore.store_workers import DEFAULT_DECODERS, StoreWorkers

log = logging.getLogger(__name__)

#: Spans committed between two checkpoints (the WAL then peaked at 12 MiB in a 600,000-span
#: run shaped like ``bench/ingest.py``'s; 32,768 spans saved 0.1-0.2 µs a span for 59 MiB).
CHECKPOINT_EVERY_SPANS = 8192


class BatchWriter:
    """Owns the TraceStore file and its worker processes; stores request bodies from the loop."""

    def __init__(
        self, db_path: str | Path, *, max_pending: int = 64, decode_workers: int = DEFAULT_DECODERS
    ) -> None:
        self._db_path = Path(db_path)
        self._workers = StoreWorkers(self._db_path, decode_workers)
        self._slots = asyncio.Semaphore(max_pending)
        self._store: TraceStore | None = None
        self._checkpointing: asyncio.Task[None] | None = None
        self._store_lock = threading.Lock()  # the checkpoint thread vs close()
        self._since_checkpoint = 0
        self.spans_written = 0

    def start(self) -> None:
        """Open the store (schema; errors surface here), then start the workers."""
        self._store = TraceStore(self._db_path)
        self._workers.start()

    async def warm(self) -> None:
        """Return once the worker processes are ready to commit a request (see
        :meth:`~rollgym.tracestore.store_workers.StoreWorkers.warm`)."""
        await self._workers.warm()

    async def store(self, body: bytes, content_type: str) -> int:
        """Decode and store one OTLP request atomically; its span count once committed.

        Raises PayloadError (nothing stored) for a bad payload, WorkerUnavailable when a
        worker died under it, and StoreFailed when its transaction failed.
        """
        async with self._slots:
            count = await self._workers.store(body, content_type)
        self.spans_written += count
        self._since_checkpoint += count
        if self._since_checkpoint >= CHECKPOINT_EVERY_SPANS and self._checkpointing is None:
            self._since_checkpoint = 0
            self._checkpointing = asyncio.create_task(self._checkpoint())
        return count

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._checkpoint_now)
        except Exception:  # the writer's own backstop checkpoints keep the WAL bounded
            log.exception("checkpointing the trace store failed")
        finally:
            self._checkpointing = None

    def _checkpoint_now(self) -> None:
        with self._store_lock:
            if self._store is not None:
                self._store.checkpoint()

    def close(self) -> None:
        """Finish every request in flight, then close (checkpoint) the store. Blocking."""
        self._workers.close()
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None
