"""The one tally of a process's spans, its record, and the file a server leaves it in.

:class:`SpanCounts` is the only loss counter: both exporter sides of the span pipeline (the
exporter child's shipper and the in-process export) count into it, and
:meth:`SpanCounts.snapshot` is the process's record.

Every process with telemetry ends with one record: how many of its spans reached the trace
backend and how many were dropped. A launched server writes its record to
``<output_dir>/logs/<instance>.telemetry.json`` when it stops (:func:`write_server_record`);
the driver sums every server's file with its own record into ``summary.json``'s
``telemetry`` (:func:`read_server_records`, :func:`add_record`). The keys are the ones
``summary.json`` shows, so the record is a typed dict and goes to JSON as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Sized
from pathlib import Path
from typing import Any, TypedDict

import orjson

from rollgym.files import write_atomically


class SpanCountRecord(TypedDict, total=False):
    """The span counts of one process (or a sum of several), as ``summary.json`` shows them.

    ``spans_exported``: the backend said it stored them. ``spans_dropped``: certainly not
    delivered (never sent, refused, or unsent at the end), with
    ``spans_dropped_by_reason`` (present when any was dropped) saying why.
    ``spans_unknown``: sent, but the backend did not answer within the request timeout, so it
    may have stored them or not (a slow backend often does): neither delivered nor dropped.
    """

    spans_exported: int
    spans_dropped: int
    spans_unknown: int
    spans_dropped_by_reason: dict[str, int]


REASON_QUEUE_FULL = "queue_full"
REASON_EXPORT_FAILED = "export_failed"
REASON_SHUTDOWN = "shutdown"
DROP_REASONS = (REASON_QUEUE_FULL, REASON_EXPORT_FAILED, REASON_SHUTDOWN)


class SpanCounts:
    """Thread-safe tallies of one process's spans, shared by its exporter side's threads.

    The hot path does not count accepted spans (that would need a lock per span): a span is
    counted accepted when the exporter side takes it off its queue (``queued``), and
    :meth:`close` adds what is still queued, so everything that never went out is counted as
    dropped at shutdown. ``in_flight`` is the batch going out now with no answer yet: at the
    end it is unknown, never dropped, since the backend may have received it whole.
    """

    __slots__ = (
        "lock",
        "accepted",
        "handed",
        "exported",
        "dropped",
        "unknown",
        "in_flight",
        "closed",
        "_queued",
        "_unsent",
    )

    def __init__(self, queued: Sized = ()) -> None:
        #: Held to read or change several tallies together (public: the exporter side's
        #: threads are its users).
        self.lock = threading.Lock()
        self.accepted = 0
        self.handed = 0
        self.exported = 0
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        #: Sent, but no answer came: the backend may or may not have stored them.
        self.unknown = 0
        #: The batch going out now (its request in progress, no answer yet).
        self.in_flight = 0
        #: Set by :meth:`close`; results that arrive later no longer change the tallies.
        self.closed = False
        self._queued = queued
        #: Accepted spans already counted dropped as ``shutdown`` (they have their outcome).
        self._unsent = 0

    def drop(self, reason: str, n: int = 1) -> None:
        """``n`` spans refused before they were accepted (a full queue, a closed pipeline)."""
        with self.lock:
            if not self.closed:
                self.dropped[reason] += n

    def drop_accepted(self, reason: str, n: int) -> None:
        """``n`` accepted spans certainly not delivered. Call with ``lock`` held."""
        if self.closed:
            return
        self.dropped[reason] += n
        if reason == REASON_SHUTDOWN:
            self._unsent += n

    def settle_in_flight(self) -> None:
        """The batch going out gets no answer any more: unknown. Call with ``lock`` held."""
        if not self.closed:
            self.unknown += self.in_flight
        self.in_flight = 0

    def settled_short_of(self, n: int) -> int:
        """How many of ``n`` accepted spans have no outcome yet."""
        return n - self.exported - self.dropped[REASON_EXPORT_FAILED] - self.unknown - self._unsent

    def close(self) -> None:
        """Freeze the tallies at shutdown: the batch going out is unknown, and every other
        accepted span that never reached an outcome (still queued, or waiting to be tried
        again) is dropped as ``shutdown``. Without this, a dead endpoint still retrying when
        the shutdown limit runs out would lose spans that no counter reports."""
        with self.lock:
            if self.closed:
                return
            self.accepted += len(self._queued)
            self.settle_in_flight()
            self.closed = True
            unsent = self.settled_short_of(self.accepted)
            if unsent > 0:
                self.dropped[REASON_SHUTDOWN] += unsent

    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def snapshot(self) -> SpanCountRecord:
        return make_record(self.exported, self.total_dropped(), self.unknown, self.dropped)


_KEYS = ("spans_exported", "spans_dropped", "spans_unknown")
_BY_REASON = "spans_dropped_by_reason"


def empty_record() -> SpanCountRecord:
    """No span exported, none dropped: the record of a process without telemetry."""
    return make_record(0, 0)


def make_record(
    exported: int, dropped: int, unknown: int = 0, by_reason: dict[str, int] | None = None
) -> SpanCountRecord:
    record: SpanCountRecord = {
        "spans_exported": exported,
        "spans_dropped": dropped,
        "spans_unknown": unknown,
    }
    reasons = {reason: n for reason, n in (by_reason or {}).items() if n}
    if dropped and reasons:
        record["spans_dropped_by_reason"] = reasons
    return record


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def add_record(total: dict[str, Any], counts: object) -> None:
    """Sum one process's record into ``total``; anything that is not a record adds nothing."""
    if not isinstance(counts, dict):
        return
    for key in _KEYS:
        total[key] = total.get(key, 0) + _count(counts.get(key))
    reasons = counts.get(_BY_REASON)
    if isinstance(reasons, dict):
        summed = total.setdefault(_BY_REASON, {})
        for reason, n in reasons.items():
            summed[str(reason)] = summed.get(str(reason), 0) + _count(n)


def _record_path(logs_dir: Path, instance: str) -> Path:
    return logs_dir / f"{instance}.telemetry.json"


def write_server_record(output_dir: str | None, instance: str, record: SpanCountRecord) -> None:
    """Leave ``record`` in ``<output_dir>/logs/<instance>.telemetry.json`` for the driver."""
    if output_dir:
        write_atomically(_record_path(Path(output_dir) / "logs", instance), orjson.dumps(record))


def read_server_records(logs_dir: Path, names: list[str]) -> SpanCountRecord:
    """The sum of the records the servers ``names`` left (every replica's: ``<name>@<i>``).

    A missing or unreadable file adds nothing: telemetry never fails the run's summary.
    """
    total: dict[str, Any] = {}
    paths = [_record_path(logs_dir, name) for name in names]
    paths += [path for name in names for path in sorted(logs_dir.glob(f"{name}@*.telemetry.json"))]
    for path in paths:
        try:
            add_record(total, orjson.loads(path.read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            continue
    return make_record(
        total.get("spans_exported", 0),
        total.get("spans_dropped", 0),
        total.get("spans_unknown", 0),
        total.get(_BY_REASON),
    )
