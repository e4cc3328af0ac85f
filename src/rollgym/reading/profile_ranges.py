"""Splitting a store's traces into trace-id ranges, read by processes side by side.

Why: the profile's per-span work is Python, one core's worth; a trace's spans are all the
profile needs to attribute its dispatches, and trace ids are random, so cutting the id space
at the dispatches' quantiles gives each process an equal share of the work with nothing to
exchange until the end (sums and lists that merge by adding). Small stores stay in one
process: starting a second one costs more than it saves (``MIN_DISPATCHES``).

The caller's function runs in this process for the first range and in fresh ``spawn``
processes for the others (spawn, not fork: the viewer calls the profile from a threaded
server, and a forked thread-holding process can deadlock).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

import apsw

#: [low, high) of trace ids; None: unbounded on that side.
TraceRange = tuple[bytes | None, bytes | None]
#: More processes than this buy nothing on the machines the profile runs on (and the read
#: itself, SQLite's, is shared by all of them through the page cache).
MAX_WORKERS = 2
#: Below this many dispatches one process is faster than starting another (about 0.5 s).
MIN_DISPATCHES = 20_000

_Result = TypeVar("_Result")


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def choose_workers(conn: apsw.Connection, requested: int | None) -> int:
    """How many processes should read the store: ``requested`` when given (at least 1),
    else one per core up to MAX_WORKERS when the store holds MIN_DISPATCHES or more."""
    if requested is not None:
        return max(1, requested)
    cores = min(MAX_WORKERS, available_cores())
    if cores <= 1:
        return 1
    (count,) = next(iter(conn.execute("SELECT COUNT(*) FROM dispatches")))
    return cores if count >= MIN_DISPATCHES else 1


def trace_id_ranges(conn: apsw.Connection, parts: int) -> list[TraceRange]:
    """``parts`` disjoint ranges covering every trace id, each holding about as many
    dispatches' traces (fewer ranges when there are fewer distinct traces)."""
    (count,) = next(iter(conn.execute("SELECT COUNT(DISTINCT trace_id) FROM dispatches")))
    cuts: list[bytes] = []
    for i in range(1, parts):
        row = next(
            iter(
                conn.execute(
                    "SELECT DISTINCT trace_id FROM dispatches ORDER BY trace_id LIMIT 1 OFFSET ?",
                    (count * i // parts,),
                )
            ),
            None,
        )
        if row is not None and (not cuts or bytes(row[0]) > cuts[-1]):
            cuts.append(bytes(row[0]))
    bounds: list[bytes | None] = [None, *cuts, None]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def range_clause(trace_range: TraceRange | None) -> tuple[str, tuple[bytes, ...]]:
    """A SQL condition on ``trace_id`` for the range ('' for everything), and its
    parameters."""
    if trace_range is None:
        return "", ()
    low, high = trace_range
    terms, params = [], []
    if low is not None:
        terms.append("trace_id >= ?")
        params.append(low)
    if high is not None:
        terms.append("trace_id < ?")
        params.append(high)
    return " AND ".join(terms), tuple(params)


def run_over_ranges(
    fn: Callable[..., _Result], argument_lists: Sequence[tuple[object, ...]]
) -> list[_Result]:
    """``fn(*arguments)`` for each argument list, in order: the first here, the rest in
    worker processes at the same time (``fn`` must be a module-level function)."""
    if len(argument_lists) <= 1:
        return [fn(*arguments) for arguments in argument_lists]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(argument_lists) - 1, mp_context=context) as pool:
        futures = [pool.submit(fn, *arguments) for arguments in argument_lists[1:]]
        results = [fn(*argument_lists[0])]
        results.extend(future.result() for future in futures)
    return results
