"""Failures panel benchmark: the viewer's first load of ``/api/failures`` on a store with
thousands of failed attempts, as it was (each attempt's trace read whole, each rollout's
attempts read as whole dispatch rows with span counts) against as it is (``failures.error_spans``:
only what the failure's kind and message need; ``failures.last_attempt``: two columns).

The store is realistic: ``bench/profile_store.py``'s synthetic run (every 5th rollout retried, every
7th failing for good), copied with fresh ids until it holds ``--failed`` failed attempts
(the panel reads at most ``failures.MAX_ATTEMPTS``), each copy's rollouts with ids of their own. Both readers run side by side on one
read-only connection, twice each, alternating; the answers must be identical. Prints wall
and CPU seconds and their ratio, with the load average (a shared machine: the ratio is the
figure, not the seconds).

    python bench/failures_panel.py [--failed 5000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import profile_store

from rollgym.reading import failures
from rollgym.reading.queries import base_rollout_id, list_rollouts, rollout_attempts, trace_spans
from rollgym.tracestore.store import connect_readonly


def _failed_rows(conn: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for outcome in failures.FAILED_OUTCOMES:
        rows += list_rollouts(conn, outcome=outcome, limit=failures.MAX_ATTEMPTS)["rows"]
    rows.sort(key=lambda r: r["start_ns"])
    return rows[: failures.MAX_ATTEMPTS]


def _as_it_was(conn: Any, rows: list[dict[str, Any]]) -> list[Any]:
    """The report's per-row reads as they were: whole traces, whole attempt rows."""
    last: dict[str, str] = {}
    answers = []
    for row in rows:
        base = base_rollout_id(row["rollout_id"])
        if base not in last:
            attempts = rollout_attempts(conn, base)
            last[base] = max(attempts, key=lambda a: a["attempt"] or 0)["rollout_id"]
        error = failures.attempt_error(row, trace_spans(conn, row["trace_id"]))
        answers.append((error, last[base] == row["rollout_id"]))
    return answers


def _as_it_is(conn: Any, rows: list[dict[str, Any]]) -> list[Any]:
    last: dict[str, str | None] = {}
    answers = []
    for row in rows:
        base = base_rollout_id(row["rollout_id"])
        if base not in last:
            last[base] = failures.last_attempt(conn, base)
        error = failures.attempt_error(row, failures.error_spans(conn, row["trace_id"]))
        answers.append((error, last[base] == row["rollout_id"]))
    return answers


def _timed(read: Any, conn: Any, rows: list[dict[str, Any]]) -> tuple[float, float, list[Any]]:
    started, cpu = time.perf_counter(), time.process_time()
    answers = read(conn, rows)
    return time.perf_counter() - started, time.process_time() - cpu, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failed", type=int, default=failures.MAX_ATTEMPTS)
    args = parser.parse_args()
    bench = profile_store
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        source = bench.template(directory)
        probe = connect_readonly(source)
        per_copy = len(_failed_rows(probe))
        spans_per_copy = probe.execute(
            "SELECT count(*) FROM spans WHERE trace_id IN (SELECT trace_id FROM dispatches)"
        ).fetchone()[0]
        probe.close()
        copies = -(-args.failed // per_copy)
        db = directory / "traces.db"
        spans = bench.build(source, db, copies * spans_per_copy, distinct_rollouts=True)
        conn = connect_readonly(db)
        rows = _failed_rows(conn)
        print(f"store: {spans} spans, {len(rows)} failed attempts read by the panel")
        results: dict[str, list[tuple[float, float]]] = {"as it was": [], "as it is": []}
        answers: dict[str, list[Any]] = {}
        for _round in range(2):
            for name, read in (("as it was", _as_it_was), ("as it is", _as_it_is)):
                wall, cpu, answers[name] = _timed(read, conn, rows)
                results[name].append((wall, cpu))
        started = time.perf_counter()
        shown, _total = failures.failed_attempts(conn)
        panel_s = time.perf_counter() - started
        conn.close()
        load = os.getloadavg()[0]
        best = {name: min(runs) for name, runs in results.items()}
        for name, (wall, cpu) in best.items():
            print(f"{name:12s}: {wall:.2f} s wall, {cpu:.2f} s CPU (best of 2)")
        old, new = best["as it was"], best["as it is"]
        print(
            f"as it is / as it was: {new[0] / old[0]:.2f}x wall, {new[1] / old[1]:.2f}x CPU; "
            f"same kinds, messages and finals: {answers['as it was'] == answers['as it is']}"
        )
        print(
            f"the whole panel report (failed_attempts, {len(shown)} rows): {panel_s:.2f} s; "
            f"load average {load:.1f}"
        )


if __name__ == "__main__":
    main()
