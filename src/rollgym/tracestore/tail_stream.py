"""A tail-sampled run's decided traces, leaving its store while the run goes.

The driver decides each rollout attempt's trace when the attempt ends
(:mod:`rollgym.telemetry.sampling_tail`); its spans, from every process, wait in the run's
store. A background thread here takes each decision once a grace period has passed (time for
the other processes' exporters to flush that trace's spans into the store) and, in rounds:

- sends a kept trace's spans to the OTLP backend (with an endpoint), in batches;
- removes a dropped trace's spans, links and dispatch rows from the store.

It never decides or slows a rollout: the dispatcher only appends to the sampler's queue. The
end of the run (:meth:`TailStream.finish`, once every process has flushed) sends what is left
(late spans, the decisions still in their grace period, the startup and job traces) and
removes every dropped trace once more, so a span that came late is neither lost nor half
kept.

**Exactly once.** The store numbers its rows in the order they are committed (SQLite's rowid:
the largest so far plus one; only this module deletes). ``_done`` is a high-water mark: every
stored span of a forwarded trace numbered up to it has been handed to the sender. A round
reads the largest number (``hi``), sends the spans of the newly due kept traces up to ``hi``
and the spans numbered above ``_done`` up to ``hi`` of the traces sent before (late ones),
then sets ``_done`` to ``hi``. Deleting the rows at the top would let new rows take their
numbers again, so after each removal ``_done`` drops to the largest number left (nothing lies
above it). What a round sends is staged first, in one transaction that also records the traces
as sent: a round that fails sends nothing and changes nothing, and the end sends it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rollgym.tracestore.store import BUSY_TIMEOUT_MS
from rollgym.tracestore.tail_drop import delete_listed
from rollgym.tracestore.tail_forward import BATCH, SPAN_FIELDS, Forwarded, Sender, SpanReader

_log = logging.getLogger(__name__)

#: The longest wait between two rounds (seconds); shorter when the grace period is short.
MAX_INTERVAL_S = 1.0

#: The stream's bookkeeping, in its own connection's temporary database (never in the file):
#: the kept traces sent (tail_sent), the dropped ones removed (tail_dropped: counted once the
#: removal found spans; mine: decided by this session), and a round's scratch tables.
_TEMP_TABLES = """
CREATE TEMP TABLE IF NOT EXISTS tail_sent (trace_id BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TEMP TABLE IF NOT EXISTS tail_due (trace_id BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TEMP TABLE IF NOT EXISTS tail_batch (rid INTEGER PRIMARY KEY, late INTEGER NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS tail_dropped (
    trace_id BLOB PRIMARY KEY, counted INTEGER NOT NULL, mine INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TEMP TABLE IF NOT EXISTS tail_gone (trace_id BLOB PRIMARY KEY) WITHOUT ROWID;
"""


class Decisions(Protocol):
    """Where the decisions wait (the run's :class:`~rollgym.telemetry.sampling_tail.TailSampler`)."""

    def due(self, before: float, /) -> list[tuple[bytes, bool]]: ...


@dataclass
class Removals:
    """What was removed from the store: this session's dropped traces, and those an earlier
    session (killed before its end) left; ``spans_before_end``: removed while the run went."""

    spans: int = 0
    traces: int = 0
    earlier_spans: int = 0
    earlier_traces: int = 0
    spans_before_end: int = 0


class TailStream:
    """The background thread of one session; :meth:`start`, then :meth:`finish` (or
    :meth:`stop` when the run ends abnormally: the next session's end cleans up)."""

    def __init__(
        self,
        db_path: str | Path,
        decisions: Decisions,
        *,
        grace_s: float,
        since_ns: int,
        sender: Sender | None = None,
        interval_s: float | None = None,
        batch: int = BATCH,
    ) -> None:
        self._db_path = Path(db_path)
        self._batch = batch
        self._decisions = decisions
        self.grace_s = grace_s
        self._interval = (
            interval_s if interval_s is not None else min(MAX_INTERVAL_S, max(0.05, grace_s / 2))
        )
        self._since_ns = since_ns
        self.sender = sender
        self.removed = Removals()
        #: Rounds that failed (the store unreadable, its lock held past the busy timeout): what
        #: they had is left to the next round or the end. The last one's error.
        self.round_errors = 0
        self.last_error: str | None = None
        #: Why the end pass failed (then dropped traces may be left in the store), or None.
        self.end_error: str | None = None
        self._conn: sqlite3.Connection | None = None
        self._reader: SpanReader | None = None
        self._done = 0
        self._any_dropped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def forwarded(self) -> Forwarded | None:
        return self.sender.counts if self.sender is not None else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rollgym-tail-stream", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the rounds without the end pass (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def finish(self, dropped: Iterable[bytes], earlier: Iterable[bytes] = ()) -> None:
        """The end pass, once every process has flushed into the store: remove every dropped
        trace (this session's ``dropped``, and ``earlier`` sessions' that are still there),
        then send every span of this session that is not sent yet."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            conn = self._connect()
            if conn is None:
                self.end_error = f"no trace store at {self._db_path}"
                return
            self._decisions.due(math.inf)  # every one is in ``dropped`` or sent below
            self._remove_all(conn, dropped, earlier)
            if self.sender is not None:
                self._send_staged(conn, self._stage_rest(conn))
        except Exception as exc:  # noqa: BLE001 - telemetry never fails a run: said, counted
            self.end_error = str(exc) or type(exc).__name__
        finally:
            self.stop()

    # --- rounds -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.round(time.monotonic() - self.grace_s)
            except Exception as exc:  # noqa: BLE001 - a round's trouble waits for the next one
                self._fail(str(exc) or type(exc).__name__)

    def round(self, before: float) -> None:
        """Send and remove the traces decided at or before ``before`` (monotonic seconds), and
        what came late of those handled before."""
        conn = self._connect()
        if conn is None:
            return  # the store is not there yet: the decisions wait in their queue
        due = self._decisions.due(before)
        lo = self._done
        if self.sender is not None:
            hi, staged = self._stage_round(conn, [t for t, kept in due if kept], lo)
            self._done = hi
            self._send_staged(conn, staged)
        else:
            (hi,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM spans").fetchone()
            self._done = hi
        dropped = [t for t, kept in due if not kept]
        self._any_dropped = self._any_dropped or bool(dropped)
        if self._any_dropped:  # else no write lock taken: nothing to remove, none late
            self._remove_round(conn, dropped, lo, hi)

    def _stage_round(self, conn: sqlite3.Connection, kept: list[bytes], lo: int) -> tuple[int, int]:
        """Stage the round's spans and record its traces as sent, in one transaction (one
        snapshot of the store); (the high-water mark, spans staged)."""
        conn.execute("BEGIN")
        try:
            (hi,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM spans").fetchone()
            conn.executemany("INSERT OR IGNORE INTO tail_due VALUES (?)", ((t,) for t in kept))
            staged = conn.execute(
                "INSERT OR IGNORE INTO tail_batch (rid, late) SELECT s.rowid, 1 FROM spans s "
                "WHERE s.rowid > ? AND s.rowid <= ? AND EXISTS "
                "(SELECT 1 FROM tail_sent t WHERE t.trace_id = s.trace_id)",
                (lo, hi),
            ).rowcount
            staged += conn.execute(
                "INSERT OR IGNORE INTO tail_batch (rid, late) SELECT s.rowid, 0 "
                "FROM tail_due d CROSS JOIN spans s ON s.trace_id = d.trace_id WHERE s.rowid <= ?",
                (hi,),
            ).rowcount
            conn.execute("INSERT OR IGNORE INTO tail_sent SELECT trace_id FROM tail_due")
            conn.execute("DELETE FROM tail_due")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return int(hi), int(staged)

    def _stage_rest(self, conn: sqlite3.Connection) -> int:
        """The end: stage every span of this session not sent yet (late spans of sent traces,
        the traces still in their grace period, the startup and job traces)."""
        conn.execute("BEGIN")
        try:
            staged = conn.execute(
                "INSERT OR IGNORE INTO tail_batch (rid, late) SELECT s.rowid, "
                "EXISTS (SELECT 1 FROM tail_sent t WHERE t.trace_id = s.trace_id) "
                "FROM spans s WHERE s.start_ns >= ? AND NOT (s.rowid <= ? AND EXISTS "
                "(SELECT 1 FROM tail_sent t WHERE t.trace_id = s.trace_id))",
                (self._since_ns, self._done),
            ).rowcount
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return int(staged)

    def _send_staged(self, conn: sqlite3.Connection, staged: int) -> None:
        """Read the staged spans back in batches and send each; a read that fails counts the
        rest failed (each staged span is counted once, sent or failed)."""
        sender, reader = self.sender, self._reader
        assert sender is not None and reader is not None
        cursor = done = 0
        try:
            while True:
                rows = conn.execute(
                    f"SELECT b.rid, b.late, {SPAN_FIELDS} FROM tail_batch b "
                    "CROSS JOIN spans s ON s.rowid = b.rid WHERE b.rid > ? ORDER BY b.rid LIMIT ?",
                    (cursor, self._batch),
                ).fetchall()
                if not rows:
                    break
                cursor = rows[-1][0]
                sender.send([reader.span(row[2:]) for row in rows], sum(r[1] for r in rows))
                done += len(rows)
        except sqlite3.Error:
            sender.counts.spans_failed += max(0, staged - done)
            raise
        finally:
            conn.execute("DELETE FROM tail_batch")

    def _remove_round(
        self, conn: sqlite3.Connection, dropped: list[bytes], lo: int, hi: int
    ) -> None:
        """Remove the newly due dropped traces whole, and the spans numbered in (lo, hi] of
        dropped traces removed before (late ones)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM tail_gone")
            rows = [(t,) for t in dropped]
            conn.executemany("INSERT OR IGNORE INTO tail_dropped VALUES (?, 0, 1)", rows)
            conn.executemany("INSERT OR IGNORE INTO tail_gone VALUES (?)", rows)
            if hi > lo:
                conn.execute(
                    "INSERT OR IGNORE INTO tail_gone SELECT s.trace_id FROM spans s "
                    "WHERE s.rowid > ? AND s.rowid <= ? AND EXISTS "
                    "(SELECT 1 FROM tail_dropped d WHERE d.trace_id = s.trace_id)",
                    (lo, hi),
                )
            spans = self._delete_gone(conn)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        self.removed.spans_before_end += spans

    def _remove_all(
        self, conn: sqlite3.Connection, dropped: Iterable[bytes], earlier: Iterable[bytes]
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT OR IGNORE INTO tail_dropped VALUES (?, 0, 1)", ((t,) for t in dropped)
            )
            conn.executemany(
                "INSERT OR IGNORE INTO tail_dropped VALUES (?, 0, 0)", ((t,) for t in earlier)
            )
            conn.execute("DELETE FROM tail_gone")
            conn.execute("INSERT INTO tail_gone SELECT trace_id FROM tail_dropped")
            self._delete_gone(conn)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _delete_gone(self, conn: sqlite3.Connection) -> int:
        """Inside a write transaction: delete the traces in ``tail_gone``, count them (a trace
        once, the first time spans of it are removed), and lower the high-water mark to the
        largest row number left. The spans deleted."""
        counted: dict[int, tuple[int, int]] = {}
        for mine, traces, spans in conn.execute(
            "SELECT d.mine, count(DISTINCT CASE WHEN d.counted = 0 THEN d.trace_id END), count(*) "
            "FROM tail_gone g JOIN tail_dropped d ON d.trace_id = g.trace_id "
            "JOIN spans s ON s.trace_id = g.trace_id GROUP BY d.mine"
        ):
            counted[int(mine)] = (int(traces), int(spans))
        conn.execute(
            "UPDATE tail_dropped SET counted = 1 WHERE counted = 0 AND trace_id IN "
            "(SELECT trace_id FROM tail_gone) AND EXISTS "
            "(SELECT 1 FROM spans s WHERE s.trace_id = tail_dropped.trace_id)"
        )
        deleted = delete_listed(conn, "temp.tail_gone")
        (top,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM spans").fetchone()
        self._done = min(self._done, int(top))
        removed = self.removed
        traces, spans = counted.get(1, (0, 0))
        removed.traces += traces
        removed.spans += spans
        traces, spans = counted.get(0, (0, 0))
        removed.earlier_traces += traces
        removed.earlier_spans += spans
        return deleted

    # --- the connection -----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        """The stream's own connection to the store, once the store made its tables."""
        if self._conn is not None:
            return self._conn
        if not self._db_path.exists():
            return None
        conn = sqlite3.connect(
            self._db_path.resolve().as_uri() + "?mode=rw",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'spans'"
            ).fetchone()
            if found is None:
                conn.close()
                return None
            conn.executescript(_TEMP_TABLES)
            # no trace is sent or removed yet: no span stored so far can come late
            (self._done,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM spans").fetchone()
        except BaseException:
            conn.close()
            raise
        self._conn, self._reader = conn, SpanReader(conn)
        return conn

    def _fail(self, message: str) -> None:
        self.round_errors += 1
        self.last_error = message
        if self.round_errors == 1:
            _log.warning("tail sampling: a round failed (%s); the end of the run retries", message)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
