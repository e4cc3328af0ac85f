"""Progress: a rich bar on a terminal, plain lines otherwise, and ``progress.json``.

``progress.json`` is for machines (a dashboard, a watchdog): rewritten atomically at most once a
second with the counts, rate, ETA and the ten oldest rollouts still in flight, so a hung tail
(one rollout stuck for minutes) is visible by id. The reporter only reads counters the
collection keeps anyway; it never slows a rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypedDict

from rollgym.driver.dispatch_window import DispatchWindows, WindowView
from rollgym.driver.input_file import input_lines
from rollgym.driver.retry import InFlight
from rollgym.driver.summary import Aggregator, write_json_atomic
from rollgym.printable import printable

if TYPE_CHECKING:  # rich loads only when the bar is drawn
    from rich.progress import Progress

OLDEST_SHOWN = 10


def count_rows(path: Path) -> int:
    """Non-blank lines of the input: the ETA's denominator (streams; one line in memory).
    A damaged compressed input raises :class:`~rollgym.errors.InputError`."""
    return sum(1 for raw in input_lines(path) if raw.strip())


def resume_line(output_dir: Path, aggregator: Aggregator, total: int | None) -> str:
    """The one line a resume starts with: what earlier sessions recorded, what runs now."""
    done = aggregator.requested
    counts = f"{aggregator.completed} completed, {aggregator.failed} failed"
    if total is None:
        return f"rollgym: resuming {printable(output_dir)}: {done} rollouts already recorded ({counts})"
    left = max(total - done, 0)
    return (
        f"rollgym: resuming {printable(output_dir)}: {done} of {total} rollouts already recorded "
        f"({counts}), {left} to run"
    )


class ProgressSnapshot(TypedDict):
    """``progress.json``: the run's counts now, its rate (rollouts a second this session) and
    estimated seconds left, and the oldest rollouts still in flight."""

    requested_so_far: int
    total: int | None
    completed: int
    failed: int
    failed_by_kind: dict[str, int]
    in_flight: int
    rate: float
    eta_s: float | None
    elapsed_s: float
    oldest_in_flight: list[dict[str, object]]
    #: Each dispatch server's window: its size, attempts sent, attempts waiting unsent.
    dispatch_windows: dict[str, WindowView]


def failure_counts(failed_by_kind: dict[str, int]) -> str:
    """``invalid_row 4, unknown_agent 1``: failures by kind, most first."""
    ranked = sorted(failed_by_kind.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{kind} {count}" for kind, count in ranked)


def _unsent(snap: ProgressSnapshot) -> str:
    """`` (N waiting for a dispatch window)`` while attempts wait unsent, else nothing: those
    count as in flight, so a run held back by its windows says so."""
    waiting = sum(view["waiting"] for view in snap["dispatch_windows"].values())
    return f" ({waiting} waiting for a dispatch window)" if waiting else ""


class FailureEcho:
    """Says the first failure of each kind on the console as it happens (its rollout and
    message); the rest only count, in the progress lines and the end-of-run table, so a run
    whose every row fails is loud from its first second without printing every record."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._seen: set[str] = set()

    def failed(self, error_kind: str, rollout_id: str | None, message: str) -> None:
        if error_kind in self._seen or error_kind == "cancelled":
            return
        self._seen.add(error_kind)
        # Both came from input or a server (a model's answer quoted in an error): printed
        # escaped, so nothing in them acts on the terminal or starts a line of its own.
        first_line = printable(message.split("\n", 1)[0]) if message else ""
        if len(first_line) > 300:
            first_line = first_line[:297] + "..."
        who = f" {printable(rollout_id)}" if rollout_id else ""
        stream = self._stream if self._stream is not None else sys.stderr
        print(
            f"rollgym: failure ({error_kind}){who}: {first_line} "
            f"(first of its kind; the rest are counted, all are in failures.jsonl)",
            file=stream,
            flush=True,
        )


class ProgressReporter:
    """Samples the aggregator and in-flight registry; renders them three ways."""

    def __init__(
        self,
        aggregator: Aggregator,
        in_flight: InFlight,
        *,
        total: int | None,
        path: Path | None,
        interval_s: float,
        stream: TextIO | None = None,
        windows: Callable[[], DispatchWindows | None] | None = None,
    ) -> None:
        """``windows``: the dispatch windows of the stream now (the collector's)."""
        self._aggregator = aggregator
        self._in_flight = in_flight
        self._windows = windows
        self._total = total
        self._path = path
        self._interval = interval_s
        self._stream = stream if stream is not None else sys.stderr
        self._start = time.monotonic()
        self._base = aggregator.requested  # records of earlier sessions do not make the rate
        self._task: asyncio.Task[None] | None = None
        self._bar: Progress | None = None

    def snapshot(self) -> ProgressSnapshot:
        """The ``progress.json`` content right now."""
        agg = self._aggregator
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = (agg.requested - self._base) / elapsed
        in_flight = len(self._in_flight)
        windows = self._windows() if self._windows is not None else None
        eta = None
        total = agg.expected_total(self._total)  # an unreadable line is one record
        if total is not None and rate > 0:
            eta = round(max(total - agg.requested, 0) / rate, 1)
        return {
            "requested_so_far": agg.requested + in_flight,
            "total": total,
            "completed": agg.completed,
            "failed": agg.failed,
            "failed_by_kind": dict(agg.failed_by_kind),
            "in_flight": in_flight,
            "rate": round(rate, 2),
            "eta_s": eta,
            "elapsed_s": round(elapsed, 1),
            "oldest_in_flight": self._in_flight.oldest(OLDEST_SHOWN),
            "dispatch_windows": windows.view() if windows is not None else {},
        }

    def line(self, snap: ProgressSnapshot) -> str:
        total = f"/{snap['total']}" if snap["total"] is not None else ""
        eta = f", eta {snap['eta_s']:.0f}s" if snap["eta_s"] is not None else ""
        kinds = failure_counts(snap["failed_by_kind"])
        unsent = _unsent(snap)
        return (
            f"[rollgym] {snap['completed'] + snap['failed']}{total} done "
            f"({snap['completed']} completed, {snap['failed']} failed{': ' + kinds if kinds else ''}), "
            f"{snap['in_flight']} in flight{unsent}, {snap['rate']:.1f}/s{eta}"
        )

    def start(self) -> None:
        if self._stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("rollouts"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                console=Console(file=self._stream),
                transient=False,
            )
            self._bar_task = self._bar.add_task("rollouts", total=self._total, detail="")
            self._bar.start()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        last_line = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            snap = self.tick()
            if self._bar is None and time.monotonic() - last_line >= self._interval:
                last_line = time.monotonic()
                print(self.line(snap), file=self._stream, flush=True)

    def tick(self) -> ProgressSnapshot:
        """One sample: rewrite progress.json, move the bar."""
        snap = self.snapshot()
        if self._path is not None:
            with contextlib.suppress(OSError):  # advisory: a full disk shows in the records first
                write_json_atomic(self._path, snap)
        if self._bar is not None:
            done = snap["completed"] + snap["failed"]
            detail = (
                f"{snap['failed']} failed, {snap['in_flight']} in flight{_unsent(snap)}, "
                f"{snap['rate']:.0f}/s"
            )
            self._bar.update(self._bar_task, completed=done, total=snap["total"], detail=detail)
        return snap

    async def stop(self) -> None:
        """Final sample, then stop the loop and the bar."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        snap = self.tick()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._interval > 0:
            print(self.line(snap), file=self._stream, flush=True)
