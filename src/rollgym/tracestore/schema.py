"""The trace store's schema: its tables, its version, and the way from each older version.

A ``traces.db`` outlives the code that wrote it: a run is looked into, compared and exported
long after, by newer rollgym releases. So the file says which schema it holds (SQLite's
``PRAGMA user_version``), every write names its columns, and opening a store for writing
brings an older file up to :data:`SCHEMA_VERSION` in one transaction, step by step
(:data:`MIGRATIONS`). A reader accepts every version up to its own (each step only adds), and
refuses a file from a newer release with one line instead of misreading it.

Versions:

* **0**: stores written before the schema had a number (the tables below, no ``user_version``,
  no ``store_meta``).
* **1**: the same tables, and ``store_meta`` (key/value): which rollgym created the file and at
  which version, and which rollgym last migrated it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from rollgym.errors import StoreVersionError as StoreVersionError

#: The schema this code writes. Bump it with a new entry in :data:`MIGRATIONS`.
SCHEMA_VERSION = 1

#: The tables of version 0, as they always were (also created, as they are, in a new file).
TABLES_V0 = """
CREATE TABLE IF NOT EXISTS resources (
    id INTEGER PRIMARY KEY,
    fingerprint BLOB NOT NULL UNIQUE,
    run_id TEXT,
    service_name TEXT,
    attributes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_resources_run ON resources(run_id);
CREATE TABLE IF NOT EXISTS spans (
    trace_id BLOB NOT NULL,
    span_id BLOB NOT NULL,
    parent_span_id BLOB,
    name TEXT NOT NULL,
    kind INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status_code INTEGER NOT NULL,
    status_message TEXT,
    resource_id INTEGER NOT NULL,
    scope TEXT,
    rollout_id TEXT,
    run_id TEXT,
    attributes TEXT NOT NULL,
    events TEXT,
    link_count INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_spans_trace ON spans(trace_id, span_id);
CREATE INDEX IF NOT EXISTS ix_spans_rollout ON spans(rollout_id) WHERE rollout_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_spans_roots ON spans(name) WHERE parent_span_id IS NULL;
CREATE TABLE IF NOT EXISTS links (
    trace_id BLOB NOT NULL,
    span_id BLOB NOT NULL,
    idx INTEGER NOT NULL,
    linked_trace_id BLOB NOT NULL,
    linked_span_id BLOB NOT NULL,
    attributes TEXT,
    PRIMARY KEY (trace_id, span_id, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ix_links_target ON links(linked_trace_id, linked_span_id);
CREATE TABLE IF NOT EXISTS dispatches (
    trace_id BLOB NOT NULL,
    span_id BLOB NOT NULL,
    is_root INTEGER NOT NULL,
    rollout_id TEXT,
    attempt INTEGER,
    dispatch_name TEXT,
    outcome TEXT,
    reward REAL,
    start_ns INTEGER NOT NULL,
    duration_ns INTEGER NOT NULL,
    run_id TEXT,
    link_count INTEGER NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS ix_dispatches_rollout ON dispatches(rollout_id);
CREATE INDEX IF NOT EXISTS ix_dispatches_start ON dispatches(start_ns);
CREATE INDEX IF NOT EXISTS ix_dispatches_duration ON dispatches(duration_ns);
CREATE INDEX IF NOT EXISTS ix_dispatches_run ON dispatches(run_id);
"""

#: Version n-1 -> n: the statements that take a store from the version before to this one.
MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE IF NOT EXISTS store_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
""",
}

#: Everything a new store runs: the version-0 tables, then every step (each is idempotent).
SCHEMA = TABLES_V0 + "".join(MIGRATIONS[v] for v in range(1, SCHEMA_VERSION + 1))

#: The columns of each table in the order the decoders build their row tuples.
SPAN_COLUMNS: tuple[str, ...] = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "status_code",
    "status_message",
    "resource_id",
    "scope",
    "rollout_id",
    "run_id",
    "attributes",
    "events",
    "link_count",
)
LINK_COLUMNS = ("trace_id", "span_id", "idx", "linked_trace_id", "linked_span_id", "attributes")
RESOURCE_COLUMNS = ("id", "fingerprint", "run_id", "service_name", "attributes")
DISPATCH_COLUMNS = (
    "trace_id",
    "span_id",
    "is_root",
    "rollout_id",
    "attempt",
    "dispatch_name",
    "outcome",
    "reward",
    "start_ns",
    "duration_ns",
    "run_id",
    "link_count",
)


def insert_statement(table: str, columns: Sequence[str]) -> str:
    """``INSERT OR IGNORE INTO table (a, b, ...) VALUES (?, ?, ...)``: named, never positional,
    so a column added by a later version never shifts what a row's values mean."""
    return (
        f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})"
    )


INSERT_SPAN = insert_statement("spans", SPAN_COLUMNS)
INSERT_LINK = insert_statement("links", LINK_COLUMNS)
INSERT_RESOURCE = insert_statement("resources", RESOURCE_COLUMNS)
INSERT_DISPATCH = insert_statement("dispatches", DISPATCH_COLUMNS)


class _Cursor(Protocol):
    def fetchone(self) -> Any: ...


class Connection(Protocol):
    """What migrating needs of a connection: ``sqlite3`` and ``apsw`` both have it."""

    def execute(self, sql: str, bindings: Sequence[Any] = ..., /) -> _Cursor: ...


def stored_version(conn: Connection) -> int:
    """The schema version a store's file says it holds (0 for a file from before versions)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def refuse_newer(version: int, where: str) -> None:
    """One line, for a file this code cannot read safely."""
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"{where}: written by a newer rollgym (trace store schema {version}; this one "
            f"reads up to {SCHEMA_VERSION}); upgrade rollgym to read it"
        )


def _has_tables(conn: Connection) -> bool:
    row = conn.execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'spans'"
    ).fetchone()
    return bool(row[0])


def migrate(conn: Connection, where: str, rollgym_version: str) -> int:
    """Create a new store, or bring an older one to :data:`SCHEMA_VERSION`; return the
    version it held before. Runs in the caller's transaction (all steps, or none)."""
    before = stored_version(conn)
    refuse_newer(before, where)
    fresh = before == 0 and not _has_tables(conn)
    if fresh:
        _run_script(conn, SCHEMA)
    else:
        _run_script(conn, TABLES_V0)  # a damaged v0 file missing an index gets it back
        for version in range(before + 1, SCHEMA_VERSION + 1):
            _run_script(conn, MIGRATIONS[version])
    if fresh or before < SCHEMA_VERSION:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta = {"migrated_by": rollgym_version, "migrated_at": now}
        if fresh:
            meta = {"created_by": rollgym_version, "created_at": now}
        elif before == 0:
            meta["created_by"] = "rollgym before schema versions"
        for key, value in meta.items():
            conn.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)", (key, value)
            )
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return before


def _run_script(conn: Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)
