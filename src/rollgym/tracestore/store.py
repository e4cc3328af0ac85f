"""The SQLite trace store: schema, the one write path, and read connections.

Why SQLite: a run's traces must sit in its output directory as one file that scripts, the CLI
and the viewer can open with no server. WAL lets the viewer and ``rollgym traces`` read while
the receiver writes. Ids are stored as BLOBs (16/8 bytes) to keep the indexes small; every
request is one transaction, so a batch is never half-written. The tables, their version and the
migrations from older files live in :mod:`rollgym.tracestore.schema`.

Why apsw for the write connection: binding a row's 16 values through the standard ``sqlite3``
module costs more than SQLite's own insert (it looks up an adapter for every ``None`` and
``bytes`` value); apsw binds them directly, and the writer's CPU per span drops from about
11 µs to 7 µs (``docs/benchmarks.md``). Both drive the same file format, and every reader
(CLI, viewer, scripts) keeps using ``sqlite3``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import apsw
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from rollgym.errors import UnusableStoreFile as UnusableStoreFile
from rollgym.telemetry import names
from rollgym.tracestore.decode import SpanBatch, attributes, json_text
from rollgym.tracestore.schema import (
    INSERT_DISPATCH,
    INSERT_LINK,
    INSERT_RESOURCE,
    INSERT_SPAN,
    SCHEMA,
    migrate,
    refuse_newer,
    stored_version,
)

__all__ = [  # the schema's names are also read from here (tests, benchmarks)
    "EXIT_UNUSABLE_STORE",
    "INSERT_DISPATCH",
    "INSERT_LINK",
    "INSERT_RESOURCE",
    "INSERT_SPAN",
    "SCHEMA",
    "TraceStore",
    "UnusableStoreFile",
    "connect_readonly",
]

#: How long a writer waits for another process's transaction before failing its own.
BUSY_TIMEOUT_MS = 60_000
#: The exit status of a store process whose file is not a usable trace store (the one line
#: saying why is the last of its log): a restart would meet the same file.
EXIT_UNUSABLE_STORE = 3


def connect_readonly(db_path: str | Path) -> sqlite3.Connection:
    """A read-only connection (the CLI and viewer must never write, or create, a store)."""
    path = Path(db_path)
    if not path.exists():
        raise FileNotFoundError(f"no trace store at {path}")
    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    try:
        refuse_newer(stored_version(conn), str(path))
    except BaseException:
        conn.close()
        raise
    return conn


class ResourceRegistry:
    """Resource -> row id, the same in every process that decodes for one store.

    A resource already in the database keeps its id (read once, when the registry is made); a
    new one gets an id derived from its fingerprint (the deterministic serialization), so
    decode workers need no shared counter and a restarted store gives it the same id again.
    Each batch re-inserts the resource rows it references with INSERT OR IGNORE, so a
    rolled-back batch never leaves a dangling id. Safe to share between threads: a racing
    first sight of a resource computes the same entry twice.
    """

    def __init__(self, conn: sqlite3.Connection | apsw.Connection) -> None:
        self._known: dict[bytes, tuple[int, str | None, tuple[Any, ...]]] = {}
        for row in conn.execute("SELECT * FROM resources"):
            self._known[bytes(row[1])] = (row[0], row[2], tuple(row))

    def __call__(self, resource: Resource) -> tuple[int, str | None, tuple[Any, ...]]:
        fingerprint = resource.SerializeToString(deterministic=True)
        known = self._known.get(fingerprint)
        if known is not None:
            return known
        attrs = attributes(resource.attributes)
        run_id = attrs.get(names.RUN_ID)
        run_id = None if run_id is None else str(run_id)
        service = attrs.get(names.SERVICE_NAME)
        row_id = resource_row_id(fingerprint)
        row = (row_id, fingerprint, run_id, service, json_text(attrs))
        known = self._known[fingerprint] = (row_id, run_id, row)
        return known


def _rollgym_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"rollgym {version('rollgym')}"
    except PackageNotFoundError:
        return "rollgym (not installed)"


def resource_row_id(fingerprint: bytes) -> int:
    """A positive 63-bit id from a resource's fingerprint (collisions: about 2**-63 a pair)."""
    digest = hashlib.blake2b(fingerprint, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class TraceStore:
    """A write connection to one ``traces.db``; not thread-safe: one thread owns it."""

    def __init__(self, db_path: str | Path, *, autocheckpoint_pages: int = 1000) -> None:
        """``autocheckpoint_pages``: the WAL size (pages) past which a commit of this connection
        also checkpoints (SQLite's default, 1000); the receiver's writer process sets it high
        and leaves checkpoints to the store process (:meth:`checkpoint`)."""
        self.path = Path(db_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # apsw leaves the connection in autocommit: we issue BEGIN/COMMIT, one per batch.
        self._conn = apsw.Connection(str(self.path))
        try:
            self._open(autocheckpoint_pages)
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
                # SQLite reads the file's schema first: a truncated or overwritten file ends here
                problem = f"{self.path} is not a readable trace store ({exc})"
                raise UnusableStoreFile(problem) from None
            raise
        self.resources = ResourceRegistry(self._conn)

    def _open(self, autocheckpoint_pages: int) -> None:
        """The connection's settings, then the schema brought to this version (one
        transaction: a failed migration leaves the file as it was)."""
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA cache_size=-65536")
        self._conn.execute("PRAGMA temp_store=MEMORY")
        # Two connections write one store (the receiver's writer process, and the store
        # process's checkpoints): one that still finds the file busy waits rather than failing.
        self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint_pages}")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            migrate(self._conn, str(self.path), _rollgym_version())
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def write_batch(self, batch: SpanBatch) -> None:
        """Store one batch's rows atomically: all of them committed, or none."""
        self.write_batches([batch])

    def write_batches(self, batches: list[SpanBatch]) -> None:
        """Store several batches' rows in one transaction: all of them committed, or none."""
        with self._transaction():
            for batch in batches:
                self._insert(batch)

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the main file, without waiting for readers or the
        writer (PASSIVE): the WAL is then reused from its start instead of growing."""
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        """Checkpoint the WAL into the main file so a finished run is one self-contained db.

        On a full disk the checkpoint cannot be written: what was committed stays in the WAL
        beside the db (SQLite reads it from there, and the next open checkpoints it), so the
        store closes without it instead of ending in a traceback; the full disk itself was
        already said where a write met it."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except apsw.FullError:
            pass
        finally:
            self._conn.close()

    # --- internals ---------------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        return _Transaction(self)

    def _insert(self, batch: SpanBatch) -> None:
        conn = self._conn
        conn.executemany(INSERT_RESOURCE, batch.resources)
        conn.executemany(INSERT_SPAN, batch.spans)
        if batch.links:
            conn.executemany(INSERT_LINK, batch.links)
        if batch.dispatches:
            conn.executemany(INSERT_DISPATCH, batch.dispatches)


class _Transaction:
    """BEGIN ... COMMIT, or ROLLBACK on any error."""

    def __init__(self, store: TraceStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        self._store._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        conn = self._store._conn
        if exc_type is None:
            conn.execute("COMMIT")
        else:
            conn.execute("ROLLBACK")
