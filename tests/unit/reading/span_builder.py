"""Spans built by hand for the profile's unit tests: a name, start and end in milliseconds, a
parent; the span and parent ids are made here, so each test says only the tree it needs."""

from __future__ import annotations

import itertools
from typing import Any

from rollgym.reading.profile_phases import SpanRecord

MS = 1_000_000
_ids = itertools.count(1)


def span(
    name: str, start_ms: float, end_ms: float, parent: SpanRecord | None, kind: int = 1, **kw: Any
) -> SpanRecord:
    """A span of ``kind`` (1: internal) under ``parent``; ``kw`` the rest of the record."""
    return SpanRecord(
        span_id=next(_ids).to_bytes(8, "big"),
        parent_id=None if parent is None else parent.span_id,
        name=name,
        kind=kind,
        start_ns=int(start_ms * MS),
        end_ns=int(end_ms * MS),
        **kw,
    )
