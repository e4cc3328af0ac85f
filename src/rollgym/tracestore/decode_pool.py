"""OTLP request bodies -> committed rows, in worker processes beside the store's own.

Why processes: turning a request into rows (protobuf parse, attribute access, one JSON text
per span) is pure Python work of 12-20 µs a span, and inserting them through ``sqlite3`` costs
another ~10 µs of Python binding and SQLite work. In threads of the store process both shared
one GIL with the event loop; worse, ``sqlite3`` gives the GIL up around every row it steps and
then waits to get it back, so with the loop busy a writer thread's wall time per span was 3-5
times its CPU time (measured: 58-78 µs vs 11 µs a span). A worker process decodes a request
and commits it itself, under its own GIL with no other busy thread: the event loop never sees
a row, and the answer (a span count) comes back only after the COMMIT, so an HTTP 200 still
means "committed". Workers take one shared lock around each transaction (SQLite allows one
writer; the lock spares them SQLite's sleeping busy handler, which stays as the backstop with
a long ``busy_timeout``). A request is one transaction, so a batch is never half-written.

Workers need no shared state: a resource's row id is derived from its fingerprint
(:class:`rollgym.tracestore.store.ResourceRegistry`), so every worker, and a store restarted
on the same file, gives the same resource the same id. A bad payload raises
:class:`~rollgym.tracestore.decode.PayloadError` in the worker, which reaches the receiver as
itself (answered 400/413 before anything touches the database). A worker that dies (killed,
out of memory) breaks the pool: the request that saw it is answered 503, which exporters
retry (SQLite discards a transaction its writer did not commit), and the next request gets a
fresh pool with a fresh lock. Workers die with the store (``PR_SET_PDEATHSIG``), so a killed
store leaves none behind.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.synchronize import Lock
from pathlib import Path

from rollgym.placement.child import die_with_parent
from rollgym.tracestore.decode import (
    PROTOBUF_MEDIA_TYPES,
    media_type,
    parse_traces,
    to_rows,
)
from rollgym.tracestore.store import TraceStore
from rollgym.tracestore.wire_rows import rows_from_protobuf

log = logging.getLogger(__name__)

#: Worker processes by default: one core is left to the event loop and the sender (two workers
#: on 2 cores measured slower: each commit of one empties the other's SQLite page cache).
DEFAULT_WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))


class StoreFailed(RuntimeError):
    """A request's transaction failed and was rolled back (HTTP 503: the sender may retry)."""


class DecoderUnavailable(RuntimeError):
    """A decode worker died under this request; the sender should retry (HTTP 503)."""


class DecodePool:
    """A pool of worker processes that decode and store requests into one store file."""

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

    async def store(self, body: bytes, content_type: str) -> int:
        """Decode and commit one request; its span count. Raises PayloadError for a bad one
        (nothing stored) and the store's error when its transaction failed."""
        pool = self._pool
        assert pool is not None, "start() first"
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, _decode_and_store, body, content_type)
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
        # spawn: the store process has threads (the executor's), which fork would not carry.
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(
            self._workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(self._db_path, os.getpid(), context.Lock()),
        )


# --- in the worker ----------------------------------------------------------------------------

_store: TraceStore | None = None
_write_lock: Lock | None = None


def _init_worker(db_path: str, store_pid: int, write_lock: Lock) -> None:
    global _store, _write_lock
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the store decides when workers stop
    die = die_with_parent(signal.SIGKILL, parent=store_pid)
    if die is not None:
        die()
    _store = TraceStore(db_path)
    _write_lock = write_lock


def _decode_and_store(body: bytes, content_type: str) -> int:
    assert _store is not None and _write_lock is not None
    if media_type(content_type) in PROTOBUF_MEDIA_TYPES:
        batch = rows_from_protobuf(body, _store.resources)
    else:
        batch = to_rows(parse_traces(body, content_type), _store.resources)
    try:
        with _write_lock:
            _store.write_batch(batch)
    except Exception as exc:  # rolled back; a plain error crosses back to the receiver (503)
        raise StoreFailed(f"{type(exc).__name__}: {exc}") from None
    return len(batch.spans)
