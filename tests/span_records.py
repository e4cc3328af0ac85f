"""Span records as rollgym's recording tracer makes them, and the body its exporter children
post to the run's trace store (``application/x-rollgym-span-records``), for the store's tests."""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from typing import Any

from rollgym.telemetry import names
from rollgym.telemetry.pipeline.frames import frame_records, pack_batch, pack_records

RESOURCE = {"service.name": "rollgym-driver", names.RUN_ID: "run-r", "host.cores": 2}
SCOPE = ("rollgym", "1.0", None)


def span_record(n: int, **fields: Any) -> tuple[Any, ...]:
    """Record ``n`` (its ids derive from ``n``): a dispatch span of rollout ``r<n>``, with
    ``fields`` (named as below) replacing any of its fifteen fields."""
    record: dict[str, Any] = {
        "trace_id": (0xABC << 64) + n,
        "span_id": 0x1000 + n,
        "parent_span_id": 0,
        "parent_is_remote": False,
        "name": names.SPAN_DISPATCH,
        "kind": 0,
        "start": 1_700_000_000_000_000_000 + n,
        "end": 1_700_000_000_000_500_000 + n,
        "attributes": {names.ROLLOUT_ID: f"r{n}", names.DISPATCH_NAME: "agent"},
        "events": None,
        "links": None,
        "status_code": 0,
        "status_message": None,
        "scope": SCOPE,
        "trace_state": None,
    }
    record.update(fields)
    return tuple(record.values())


def records_body(records: list[tuple[Any, ...]], resource: Mapping[str, Any] = RESOURCE) -> bytes:
    """The body an exporter child posts for ``records``."""
    return pack_records(marshal.dumps(dict(resource)), frame_records(pack_batch(records)))
