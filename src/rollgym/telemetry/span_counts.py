"""The span-count record of one process, and the file a server leaves it in.

Every process with telemetry ends with one record: how many of its spans reached the trace
backend and how many were dropped. A launched server writes its record to
``<output_dir>/logs/<instance>.telemetry.json`` when it stops (:func:`write_server_record`);
the driver sums every server's file with its own record into ``summary.json``'s
``telemetry`` (:func:`read_server_records`, :func:`add_record`). The keys are the ones
``summary.json`` shows, so the record is a typed dict and goes to JSON as it is.
"""

from __future__ import annotations

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
