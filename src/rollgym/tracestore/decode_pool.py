"""OTLP request bodies -> packed row batches, in worker processes beside the store's own.

Why processes: turning a request into rows (protobuf parse, attribute access through upb, one
JSON text per span) is pure Python work of 15-20 µs a span, several times SQLite's own. In
threads of the store process it shared one GIL with the event loop and the SQLite writer
(whose thread gives the GIL up for every row it steps, then waits to get it back), so the
store's ingest was a third of what a bare decode-and-append sink reached. A worker process
decodes with its own GIL and hands back one ``marshal`` blob per request (bytes, ints, strings
and ``None`` only: a few hundred ns a span each way); the event loop never sees a row, and the
writer thread unpacks the blob right before its insert.

Workers need no shared state: a resource's row id is derived from its fingerprint
(:class:`rollgym.tracestore.store.ResourceRegistry`), so every worker, and a store restarted
on the same file, gives the same resource the same id. A bad payload raises
:class:`~rollgym.tracestore.decode.PayloadError` in the worker, which reaches the receiver as
itself (answered 400/413 before anything touches the database). A worker that dies (killed,
out of memory) breaks the pool: the request that saw it is answered 503, which exporters
retry, and the next request gets a fresh pool. Workers die with the store
(``PR_SET_PDEATHSIG``), so a killed store leaves none behind.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import multiprocessing
import os
import signal
import sqlite3
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from rollgym.placement.child import die_with_parent
from rollgym.tracestore.decode import (
    PROTOBUF_MEDIA_TYPES,
    SpanBatch,
    media_type,
    parse_traces,
    to_rows,
)
from rollgym.tracestore.store import ResourceRegistry
from rollgym.tracestore.wire_rows import rows_from_protobuf

log = logging.getLogger(__name__)

#: Worker processes by default: one core is left to the store's event loop and SQLite.
DEFAULT_WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))


class DecoderUnavailable(RuntimeError):
    """A decode worker died under this request; the sender should retry (HTTP 503)."""


class DecodePool:
    """A pool of decode worker processes for one store file."""

    def __init__(self, db_path: str | Path, workers: int = DEFAULT_WORKERS) -> None:
        self._db_path = str(db_path)
        self._workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Create the pool and start its workers in the background; the store file must exist.

        The first request need not wait for the workers' imports (the OTLP protobuf modules).
        """
        self._pool = self._new_pool()
        self._pool.submit(int)  # any call starts the workers

    async def decode(self, body: bytes, content_type: str) -> bytes:
        """One request's rows, packed (see :func:`unpack`); raises PayloadError for a bad one."""
        pool = self._pool
        assert pool is not None, "start() first"
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, _decode, body, content_type)
        except BrokenProcessPool as exc:
            if self._pool is pool:  # the first request to see it replaces the pool
                log.error("a trace decode worker died; starting new ones")
                self._pool = self._new_pool()
                pool.shutdown(wait=False, cancel_futures=True)
            raise DecoderUnavailable(f"decode worker died: {exc}") from None

    def close(self) -> None:
        """Let queued decodes finish, then stop the workers. Blocking."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the store process has threads (writer, executor), which fork would not carry.
        return ProcessPoolExecutor(
            self._workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self._db_path, os.getpid()),
        )


def unpack(packed: bytes) -> SpanBatch:
    """The rows :meth:`DecodePool.decode` packed, as a batch for ``TraceStore.write_batches``."""
    spans, resources, links, dispatches = marshal.loads(packed)
    return SpanBatch(spans, resources, links, dispatches)


# --- in the worker ----------------------------------------------------------------------------

_registry: ResourceRegistry | None = None


def _init_worker(db_path: str, store_pid: int) -> None:
    global _registry
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the store decides when workers stop
    die = die_with_parent(signal.SIGKILL, parent=store_pid)
    if die is not None:
        die()
    conn = sqlite3.connect(f"file:{Path(db_path).resolve()}?mode=ro", uri=True)
    try:
        _registry = ResourceRegistry(conn)
    finally:
        conn.close()


def _decode(body: bytes, content_type: str) -> bytes:
    assert _registry is not None
    if media_type(content_type) in PROTOBUF_MEDIA_TYPES:
        batch = rows_from_protobuf(body, _registry)
    else:
        batch = to_rows(parse_traces(body, content_type), _registry)
    return marshal.dumps((batch.spans, batch.resources, batch.links, batch.dispatches))
