"""The store's write path: bounded concurrency in the event loop, writes in worker processes.

Each request body goes to a worker process of :mod:`rollgym.tracestore.decode_pool`, which
decodes it and commits its rows in one transaction, then answers with its span count; only
then does the receiver answer 200, so an HTTP 200 means "durably accepted" (WAL with
``synchronous=NORMAL``: survives a crash of the process, not necessarily a power loss). This
process keeps one connection of its own: it creates the schema before the workers start and
checkpoints the WAL into the main file when the store closes. Back-pressure: at most
``max_pending`` requests are being stored; further senders wait on a semaphore in the loop
(they are not rejected), which bounds the store's memory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rollgym.tracestore.decode_pool import DEFAULT_WORKERS, DecodePool
from rollgym.tracestore.store import TraceStore


class BatchWriter:
    """Owns the TraceStore file and its worker processes; stores request bodies from the loop."""

    def __init__(
        self, db_path: str | Path, *, max_pending: int = 64, decode_workers: int = DEFAULT_WORKERS
    ) -> None:
        self._db_path = Path(db_path)
        self._workers = DecodePool(self._db_path, decode_workers)
        self._slots = asyncio.Semaphore(max_pending)
        self._store: TraceStore | None = None
        self.spans_written = 0

    def start(self) -> None:
        """Open the store (schema; errors surface here), then start the workers."""
        self._store = TraceStore(self._db_path)
        self._workers.start()

    async def store(self, body: bytes, content_type: str) -> int:
        """Decode and store one OTLP request atomically; its span count once committed.

        Raises PayloadError (nothing stored) for a bad payload, DecoderUnavailable when a
        worker died under it, and the store's error when its transaction failed.
        """
        async with self._slots:
            count = await self._workers.store(body, content_type)
        self.spans_written += count
        return count

    def close(self) -> None:
        """Finish every request in flight, then close (checkpoint) the store. Blocking."""
        self._workers.close()
        if self._store is not None:
            self._store.close()
            self._store = None
