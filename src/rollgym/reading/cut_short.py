"""Which traces a run's own history cut short: what ``rollgym traces check`` does not count
as a violation, and why.

A process that dies without flushing loses the spans still queued in it. Two kinds of death
are in a run's records:

- a **killed session** (``kill -9`` of the driver; its servers and its trace store die with
  it): no end line in ``sessions.jsonl`` (:mod:`rollgym.driver.sessions`). A run commits a
  completed rollout's spans within about a second of its end (it waits for its store before
  the first rollout), so a kill can only take the spans of rollouts still in flight and of
  those that ended in the last moments before it. Only those are excused: a span whose trace
  belongs to a rollout recorded more than :data:`KILL_WINDOW_S` before the session's last
  sign of life (its last recorded row, the last span its processes committed) is checked as
  in any session, and such a rollout whose trace is absent is a violation. The kill came at
  or after that last sign, so the window can only excuse more than what the kill took, never
  less, and it is bounded;
- a **dead server process** (a replica killed or crashed mid-run, then restarted by the
  supervisor): a ``died`` line in ``servers.jsonl``
  (:mod:`rollgym.incarnations`). A trace that reached that process while it lived
  (a client span to its address in its lifetime) may hang without the spans it held.

Strict by design: only a *missing parent* is excused by a dead server process (the trace's
dispatch root lives in the driver, which did not die, so isolation is still checked there);
a killed session excuses a rollout's span outside its dispatch trace only when that trace has
no dispatch root at all (it died with the driver). A span of rollout A inside rollout B's
dispatch trace is a violation in every session. Each excused span is counted under the
session or the process that cut it.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rollgym.incarnations import Incarnation
from rollgym.telemetry import names

_CLIENT = 3  # OTLP SpanKind CLIENT
#: Seconds before a killed session's last sign of life in which a rollout may have ended
#: without its spans committed. A run commits them within about a second of the rollout's
#: end (measured: at most 0.54 s, ``bench/trace_durability.py``); this is twice that and more.
KILL_WINDOW_S = 2.0
#: Seconds after a recorded death in which a client span still counts as reaching that
#: process: the supervisor notices a death at its next poll, so ``died_at`` is a little late.
_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class _Window:
    start_ns: float
    end_ns: float
    label: str


@dataclass(frozen=True, slots=True)
class KilledRow:
    """A row (``rollouts.jsonl`` or ``failures.jsonl``) written by a killed session."""

    session: int
    file: str
    line: int
    finished_at: float | None
    trace_id: str | None
    rollout_id: object


@dataclass(frozen=True, slots=True)
class _Dead:
    host: str | None
    port: int
    start_ns: float
    end_ns: float
    label: str


class RunHistory:
    """The run's sessions and server incarnations, asked about one flagged span at a time."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        sessions: list[dict[str, Any]],
        incarnations: list[Incarnation],
        killed_rows: list[KilledRow] | None = None,
    ) -> None:
        self._conn = conn
        self.sessions = sessions
        self.incarnations = incarnations
        #: Excused spans by what cut them (``session 0 (killed)``, ``agent@1 pid 42 ...``).
        self.cut: Counter[str] = Counter()
        self._killed: list[_Window] = []
        #: Per killed session (its index): rows recorded before this time must have their
        #: traces (their last sign of life less :data:`KILL_WINDOW_S`).
        self.kill_cutoff: dict[int, float] = {}
        rows = killed_rows or []
        for index, session in enumerate(sessions):
            if session["ended"]:
                continue
            later = sessions[index + 1 :]
            end = float(later[0]["at"]) if later else float("inf")
            number = int(session.get("index", index))
            label = f"session {number} (killed)"
            window = _Window(float(session["at"]) * 1e9, end * 1e9, label)
            self._killed.append(window)
            last = max(
                [float(session["at"]), self._last_span_end_s(window)]
                + [r.finished_at for r in rows if r.session == number and r.finished_at]
            )
            self.kill_cutoff[number] = last - KILL_WINDOW_S
        #: Traces of rows a killed session recorded before its cutoff: they must be whole.
        self._due = {
            bytes.fromhex(r.trace_id) for r in rows if r.trace_id and not self.within_kill_window(r)
        }
        self._dead = [
            _Dead(
                inc.host,
                inc.port,
                inc.started_at * 1e9,
                (inc.died_at + _SLACK_S) * 1e9,
                f"{inc.label} ({inc.exit}) in session {inc.session}",
            )
            for inc in incarnations
            if inc.died_at is not None and inc.port is not None
        ]
        self._touched: dict[bytes, str | None] = {}

    def within_kill_window(self, row: KilledRow) -> bool:
        """True when ``row`` was recorded within :data:`KILL_WINDOW_S` of its killed
        session's last sign of life: its spans may have died with the session's processes."""
        cutoff = self.kill_cutoff.get(row.session)
        if cutoff is None:
            return False
        return row.finished_at is not None and row.finished_at >= cutoff

    def _last_span_end_s(self, window: _Window) -> float:
        """When the last span that started in ``window`` ended (seconds), 0 when none."""
        end = window.end_ns if window.end_ns != float("inf") else 2**63 - 1
        (last,) = self._conn.execute(
            "SELECT MAX(end_ns) FROM spans WHERE start_ns >= ? AND start_ns < ?",
            (int(window.start_ns), int(end)),
        ).fetchone()
        return float(last or 0) / 1e9

    def excuses_missing_parent(self, trace_id: bytes, start_ns: int) -> bool:
        """True (and counted) when a killed session or a dead process explains the gap."""
        label = self._killed_window(start_ns, trace_id) or self._dead_process_in(trace_id)
        return self._count(label)

    def excuses_homeless(self, trace_id: bytes, start_ns: int) -> bool:
        """True (and counted) for a rollout's span whose trace has no dispatch root at all
        and started in a killed session: its dispatch span died queued in the driver."""
        label = self._killed_window(start_ns, trace_id)
        if label is None or self.has_dispatch(trace_id):
            return False
        return self._count(label)

    def _count(self, label: str | None) -> bool:
        if label is None:
            return False
        self.cut[label] += 1
        return True

    def _killed_window(self, start_ns: int, trace_id: bytes | None = None) -> str | None:
        """The killed session a span that started at ``start_ns`` fell in, unless its trace is
        one that session recorded before its kill window (that trace must be whole)."""
        if trace_id is not None and trace_id in self._due:
            return None
        for window in self._killed:
            if window.start_ns <= start_ns < window.end_ns:
                return window.label
        return None

    def has_dispatch(self, trace_id: bytes) -> bool:
        """Whether the store holds a dispatch span (of any rollout) in this trace."""
        return (
            self._conn.execute(
                "SELECT 1 FROM dispatches WHERE trace_id = ? LIMIT 1", (trace_id,)
            ).fetchone()
            is not None
        )

    def _dead_process_in(self, trace_id: bytes) -> str | None:
        """The dead incarnation this trace reached while it lived, if any (one query a trace)."""
        if not self._dead:
            return None
        if trace_id in self._touched:
            return self._touched[trace_id]
        found: str | None = None
        for start_ns, host, port in self._conn.execute(
            "SELECT start_ns, json_extract(attributes, ?), json_extract(attributes, ?) "
            "FROM spans WHERE trace_id = ? AND kind = ?",
            (
                f'$."{names.SERVER_ADDRESS_HTTP}"',
                f'$."{names.SERVER_PORT}"',
                trace_id,
                _CLIENT,
            ),
        ):
            for dead in self._dead:
                if (
                    port == dead.port
                    and (host is None or dead.host is None or host == dead.host)
                    and dead.start_ns <= start_ns <= dead.end_ns
                ):
                    found = dead.label
                    break
            if found is not None:
                break
        self._touched[trace_id] = found
        return found
