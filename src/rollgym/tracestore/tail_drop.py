"""The store's side of tail sampling: every span of the traces the driver dropped, removed.

Every process of a run exports to its local store, so the store is the one place where all of
a rollout's spans meet; they wait there (on disk, not in any process's memory) until the
driver's decision is known, and a dropped trace is removed whole: its spans, its links, its
dispatch rows. The driver hands the dropped ids over once every process has flushed into the
store (servers stopped, the driver's own spans delivered), so no span of a dropped trace can
arrive later and be half-kept (``docs/design/tail-sampling.md``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rollgym.tracestore.store import BUSY_TIMEOUT_MS


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
        spans = conn.execute(
            "DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM dropped)"
        ).rowcount
        conn.execute("DELETE FROM links WHERE trace_id IN (SELECT trace_id FROM dropped)")
        conn.execute("DELETE FROM dispatches WHERE trace_id IN (SELECT trace_id FROM dropped)")
        conn.execute("COMMIT")
        return Removed(int(traces), int(spans))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
