"""The store's side of tail sampling: every span of the traces the driver dropped, removed.

Every process of a run exports to its local store, so the store is the one place where all of
a rollout's spans meet; they wait there (on disk, not in any process's memory) until the
driver's decision is known, and a dropped trace is removed whole: its spans, its links, its
dispatch rows. The run's tail stream (:mod:`rollgym.tracestore.tail_stream`) removes each one
a grace period after its decision, and once more at the end of the run, after every process
has flushed into the store (servers stopped, the driver's own spans delivered), so a span of a
dropped trace that arrived late cannot stay: nothing is half kept
(``docs/design/tail-sampling.md``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from rollgym.tracestore.store import BUSY_TIMEOUT_MS

#: The run's files whose rows say ``trace_sampled: false`` for a dropped trace.
ROW_FILES = ("rollouts.jsonl", "failures.jsonl")


class Removed(NamedTuple):
    """What removing dropped traces took out of the store."""

    traces: int
    spans: int


def remove_traces(db_path: str | Path, trace_ids: Sequence[bytes]) -> Removed:
    """Remove every span, link and dispatch row of ``trace_ids`` in one transaction.

    Safe beside the store's own writer (WAL; it waits up to the busy timeout for the write
    lock). ``traces`` counts the ids that had any span.
    """
    if not trace_ids:
        return Removed(0, 0)
    conn = sqlite3.connect(str(db_path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TEMP TABLE dropped (trace_id BLOB PRIMARY KEY) WITHOUT ROWID")
        conn.executemany(
            "INSERT OR IGNORE INTO dropped VALUES (?)", ((trace_id,) for trace_id in trace_ids)
        )
        (traces,) = conn.execute(
            "SELECT count(*) FROM dropped d WHERE EXISTS "
            "(SELECT 1 FROM spans s WHERE s.trace_id = d.trace_id)"
        ).fetchone()
        spans = delete_listed(conn, "temp.dropped")
        conn.execute("COMMIT")
        return Removed(int(traces), int(spans))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def delete_listed(conn: sqlite3.Connection, table: str) -> int:
    """Delete every span, link and dispatch row of the trace ids in ``table`` (a table of the
    connection with a ``trace_id`` column), inside the caller's transaction; the spans
    deleted."""
    spans = conn.execute(
        f"DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM {table})"
    ).rowcount
    conn.execute(f"DELETE FROM links WHERE trace_id IN (SELECT trace_id FROM {table})")
    conn.execute(f"DELETE FROM dispatches WHERE trace_id IN (SELECT trace_id FROM {table})")
    return int(spans)


def dropped_in_rows(run_dir: Path) -> Iterator[bytes]:
    """The trace ids the run's rows say were dropped (``trace_sampled: false``), of every
    session: a session killed before its end left some of its dropped traces in the store,
    and the next session's end removes them (what ``traces check`` holds the store to)."""
    for name in ROW_FILES:
        try:
            lines = (run_dir / name).open("rb")
        except OSError:
            continue
        with lines:
            for line in lines:
                if b"trace_sampled" not in line:
                    continue
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(row, dict) or row.get("trace_sampled") is not False:
                    continue
                trace_id = row.get("trace_id")
                if isinstance(trace_id, str) and len(trace_id) == 32:
                    try:
                        yield bytes.fromhex(trace_id)
                    except ValueError:
                        continue
