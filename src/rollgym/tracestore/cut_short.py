"""Which traces a run's own history cut short: what ``rollgym traces check`` does not count
as a violation, and why.

A process that dies without flushing loses the spans still queued in it. Two kinds of death
are in a run's records:

- a **killed session** (``kill -9`` of the driver; its servers die with it): no end line in
  ``sessions.jsonl`` (:mod:`rollgym.driver.sessions`). Every span that started in its time
  window may hang without its parent, and a trace may have lost its dispatch root;
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
#: Seconds after a recorded death in which a client span still counts as reaching that
#: process: the supervisor notices a death at its next poll, so ``died_at`` is a little late.
_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class _Window:
    start_ns: float
    end_ns: float
    label: str


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
    ) -> None:
        self._conn = conn
        self.sessions = sessions
        self.incarnations = incarnations
        #: Excused spans by what cut them (``session 0 (killed)``, ``agent@1 pid 42 ...``).
        self.cut: Counter[str] = Counter()
        self._killed: list[_Window] = []
        for index, session in enumerate(sessions):
            if session["ended"]:
                continue
            later = sessions[index + 1 :]
            end = float(later[0]["at"]) if later else float("inf")
            label = f"session {session.get('index', index)} (killed)"
            self._killed.append(_Window(float(session["at"]) * 1e9, end * 1e9, label))
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

    def excuses_missing_parent(self, trace_id: bytes, start_ns: int) -> bool:
        """True (and counted) when a killed session or a dead process explains the gap."""
        label = self._killed_window(start_ns) or self._dead_process_in(trace_id)
        return self._count(label)

    def excuses_homeless(self, trace_id: bytes, start_ns: int) -> bool:
        """True (and counted) for a rollout's span whose trace has no dispatch root at all
        and started in a killed session: its dispatch span died queued in the driver."""
        label = self._killed_window(start_ns)
        if label is None or self._has_dispatch(trace_id):
            return False
        return self._count(label)

    def _count(self, label: str | None) -> bool:
        if label is None:
            return False
        self.cut[label] += 1
        return True

    def _killed_window(self, start_ns: int) -> str | None:
        for window in self._killed:
            if window.start_ns <= start_ns < window.end_ns:
                return window.label
        return None

    def _has_dispatch(self, trace_id: bytes) -> bool:
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
