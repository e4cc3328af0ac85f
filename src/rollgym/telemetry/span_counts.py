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


class SpanCountRecord(TypedDict):
    """``{"spans_exported": n, "spans_dropped": n}`` of one process (or a sum of several)."""

    spans_exported: int
    spans_dropped: int


_KEYS = ("spans_exported", "spans_dropped")


def empty_record() -> SpanCountRecord:
    """No span exported, none dropped: the record of a process without telemetry."""
    return {"spans_exported": 0, "spans_dropped": 0}


def make_record(exported: int, dropped: int) -> SpanCountRecord:
    return {"spans_exported": exported, "spans_dropped": dropped}


def add_record(total: dict[str, Any], counts: Any) -> None:
    """Sum one process's record into ``total``; anything that is not a record adds nothing."""
    if not isinstance(counts, dict):
        return
    for key in _KEYS:
        value = counts.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


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
    total: dict[str, Any] = dict(empty_record())
    paths = [_record_path(logs_dir, name) for name in names]
    paths += [path for name in names for path in sorted(logs_dir.glob(f"{name}@*.telemetry.json"))]
    for path in paths:
        try:
            add_record(total, orjson.loads(path.read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            continue
    return make_record(total["spans_exported"], total["spans_dropped"])
