"""``rollgym traces profile RUN``: where a run's rollout time went, from its trace store.

Why it reads the store in trace-id order: the ``(trace_id, span_id)`` index hands over one
trace's spans after another, so memory holds one trace at a time (plus a few numbers per
dispatch) however large the run, and a million-span store is read in one pass
(``bench/profile.py``). Attributes are parsed only for the spans that carry a split or a
count (client, engine, model-call and dispatch spans). The attribution rule itself lives in
:mod:`rollgym.tracestore.profile_phases`.

The answer is a plain dict, the same for ``--json`` and the viewer:
``phases`` (a list of ``{name, share, seconds, p50_s, p90_s, p99_s}``, shares summing to 1),
``per_dispatch_name`` (the same per agent / environment), ``stragglers``, ``timeline`` and
``accounting``.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from rollgym.telemetry import names
from rollgym.tracestore.decode import hex_id
from rollgym.tracestore.profile_phases import (
    ENGINE_PHASES,
    PHASE_INDEX,
    PHASES,
    SANDBOX,
    DispatchProfile,
    SpanRecord,
    attribute_dispatch,
)

#: Attribute of an HTTP client span: seconds it waited for a pooled connection.
CLIENT_QUEUE_KEY = names.HTTP_CLIENT_QUEUE_DURATION
_SECOND = 1e9
_ATTRIBUTE_NAMES = (names.SPAN_DISPATCH, names.SPAN_ENGINE_REQUEST, names.SPAN_MODEL_CHAT)
_SPANS_IN_TRACE_ORDER = """
SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, resource_id,
       CASE WHEN kind = 3 OR name IN (?, ?, ?) THEN attributes END
FROM spans WHERE trace_id IN (SELECT trace_id FROM dispatches) ORDER BY trace_id
"""


@dataclass(slots=True)
class _Dispatch:
    trace_id: bytes
    rollout_id: str | None
    dispatch_name: str
    outcome: str | None


@dataclass(slots=True)
class _Totals:
    """Sums and per-dispatch seconds of one group (the run, or one dispatch name)."""

    phase_ns: list[int] = field(default_factory=lambda: [0] * len(PHASES))
    per_dispatch_s: list[list[float]] = field(default_factory=lambda: [[] for _ in PHASES])
    wall_ns: int = 0
    dispatches: int = 0

    def add(self, profile: DispatchProfile) -> None:
        self.dispatches += 1
        self.wall_ns += profile.wall_ns
        for i, ns in enumerate(profile.phase_ns):
            self.phase_ns[i] += ns
            self.per_dispatch_s[i].append(ns / _SECOND)

    def phases(self) -> list[dict[str, Any]]:
        total = self.wall_ns or 1
        rows = []
        for i, name in enumerate(PHASES):
            values = sorted(self.per_dispatch_s[i])
            rows.append(
                {
                    "name": name,
                    "share": self.phase_ns[i] / total if self.wall_ns else 0.0,
                    "seconds": self.phase_ns[i] / _SECOND,
                    "p50_s": percentile(values, 0.50),
                    "p90_s": percentile(values, 0.90),
                    "p99_s": percentile(values, 0.99),
                }
            )
        return rows


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _Timeline:
    """Fixed bins over the run: completions, mean in flight and the phase mix of each."""

    def __init__(self, start_ns: int, end_ns: int, bins: int) -> None:
        self.start = start_ns
        self.width = max(1, math.ceil((end_ns - start_ns) / max(1, bins)))
        self.bins = max(1, bins)
        self.completed = [0] * self.bins
        self.phase_ns = [[0] * len(PHASES) for _ in range(self.bins)]

    def _bin(self, t: int) -> int:
        return min(self.bins - 1, max(0, (t - self.start) // self.width))

    def add(self, profile: DispatchProfile) -> None:
        self.completed[self._bin(profile.window_end_ns)] += 1
        width, start = self.width, self.start
        for lo, hi, phase in profile.segments:
            first, last = self._bin(lo), self._bin(hi - 1)
            for b in range(first, last + 1):
                b_lo, b_hi = start + b * width, start + (b + 1) * width
                piece = min(hi, b_hi) - max(lo, b_lo)
                if piece > 0:
                    self.phase_ns[b][phase] += piece

    def points(self) -> list[dict[str, Any]]:
        seconds = self.width / _SECOND
        points = []
        for b in range(self.bins):
            busy = sum(self.phase_ns[b])
            points.append(
                {
                    "t_s": b * seconds,
                    "width_s": seconds,
                    "completions_per_s": self.completed[b] / seconds,
                    "in_flight": busy / self.width,
                    "phase_mix": {
                        name: (self.phase_ns[b][i] / busy if busy else 0.0)
                        for i, name in enumerate(PHASES)
                    },
                }
            )
        return points


def profile_run(
    conn: sqlite3.Connection, *, stragglers: int = 10, bins: int = 60
) -> dict[str, Any]:
    """The whole profile of the store behind ``conn`` (see the module docstring)."""
    dispatches = {
        bytes(row[1]): _Dispatch(bytes(row[0]), row[2], row[3] or "unknown", row[4])
        for row in conn.execute(
            "SELECT trace_id, span_id, rollout_id, dispatch_name, outcome FROM dispatches"
        )
    }
    low, high = conn.execute(
        "SELECT MIN(start_ns), MAX(start_ns + duration_ns) FROM dispatches"
    ).fetchone()
    server_kinds = _server_kinds(conn)
    run = _Totals()
    by_name: dict[str, _Totals] = {}
    timeline = _Timeline(low or 0, high or 0, bins)
    tails: list[tuple[int, str | None, str, str, str, str | None]] = []
    accounting = {
        "dispatches": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "model_calls": 0,
        "tool_calls": 0,
        "engine_s": 0.0,
        "sandbox_s": 0.0,
        "wall_s": 0.0,
        "spans": 0,
    }
    for trace_spans in _traces(conn, server_kinds):
        accounting["spans"] += len(trace_spans)
        for span in trace_spans:
            info = dispatches.get(span.span_id)
            if info is None or span.name != names.SPAN_DISPATCH:
                continue
            profile = attribute_dispatch(span, trace_spans)
            run.add(profile)
            by_name.setdefault(info.dispatch_name, _Totals()).add(profile)
            timeline.add(profile)
            _account(accounting, profile)
            tails.append(
                (
                    profile.wall_ns,
                    info.rollout_id,
                    profile.dominant_phase(),
                    info.dispatch_name,
                    hex_id(info.trace_id) or "",
                    info.outcome,
                )
            )
    tails.sort(key=lambda t: -t[0])
    return {
        "dispatches": run.dispatches,
        "wall_s": run.wall_ns / _SECOND,
        "phases": run.phases(),
        "per_dispatch_name": [
            {"dispatch_name": name, "dispatches": t.dispatches, "phases": t.phases()}
            for name, t in sorted(by_name.items())
        ],
        "stragglers": [
            {
                "rollout_id": rollout_id,
                "duration_s": wall / _SECOND,
                "dominant_phase": dominant,
                "dispatch_name": name,
                "outcome": outcome,
                "trace_id": trace_id,
            }
            for wall, rollout_id, dominant, name, trace_id, outcome in tails[:stragglers]
        ],
        "timeline": timeline.points() if run.dispatches else [],
        "accounting": accounting,
    }


def _account(accounting: dict[str, Any], profile: DispatchProfile) -> None:
    accounting["dispatches"] += 1
    accounting["input_tokens"] += profile.input_tokens
    accounting["output_tokens"] += profile.output_tokens
    accounting["model_calls"] += profile.model_calls
    accounting["tool_calls"] += profile.tool_calls
    accounting["engine_s"] += sum(profile.phase_ns[PHASE_INDEX[p]] for p in ENGINE_PHASES) / 1e9
    accounting["sandbox_s"] += profile.phase_ns[PHASE_INDEX[SANDBOX]] / _SECOND
    accounting["wall_s"] += profile.wall_ns / _SECOND


def _server_kinds(conn: sqlite3.Connection) -> dict[int, str | None]:
    kinds: dict[int, str | None] = {}
    for resource_id, text in conn.execute("SELECT id, attributes FROM resources"):
        try:
            kind = orjson.loads(text).get(names.SERVER_KIND)
        except (orjson.JSONDecodeError, AttributeError):
            kind = None
        kinds[resource_id] = kind if isinstance(kind, str) else None
    return kinds


def _traces(
    conn: sqlite3.Connection, server_kinds: dict[int, str | None]
) -> Iterator[list[SpanRecord]]:
    """The spans of every trace holding a dispatch, one trace at a time."""
    current: bytes | None = None
    batch: list[SpanRecord] = []
    cursor = conn.execute(_SPANS_IN_TRACE_ORDER, _ATTRIBUTE_NAMES)
    cursor.arraysize = 4096
    # A plain tuple factory: sqlite3.Row per span would cost more than the attribution.
    cursor.row_factory = None
    while rows := cursor.fetchmany():
        for trace_id, span_id, parent, name, kind, start, end, resource_id, attrs in rows:
            if trace_id != current:
                if batch:
                    yield batch
                batch, current = [], trace_id
            record = SpanRecord(
                span_id, parent, name, kind, start, end, server_kinds.get(resource_id)
            )
            if attrs is not None:
                _read_attributes(record, attrs)
            batch.append(record)
    if batch:
        yield batch


def _read_attributes(record: SpanRecord, text: str) -> None:
    try:
        attrs = orjson.loads(text)
    except orjson.JSONDecodeError:
        return
    if not isinstance(attrs, dict):
        return
    record.client_queue_s = _seconds(attrs.get(CLIENT_QUEUE_KEY))
    if record.name == names.SPAN_DISPATCH:
        record.admission_s = _seconds(attrs.get(names.ROLLOUT_ADMISSION_WAIT))
    elif record.name == names.SPAN_ENGINE_REQUEST:
        queue = _seconds(attrs.get(names.GEN_AI_LATENCY_TIME_IN_QUEUE))
        prefill = _seconds(attrs.get(names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL))
        decode = _seconds(attrs.get(names.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE))
        if prefill is None and decode is None:  # an engine that reports only TTFT and e2e
            ttft = _seconds(attrs.get(names.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN))
            e2e = _seconds(attrs.get(names.GEN_AI_LATENCY_E2E))
            if ttft is not None:
                prefill = max(0.0, ttft - (queue or 0.0))
                if e2e is not None:
                    decode = max(0.0, e2e - ttft)
        record.engine_queue_s, record.engine_prefill_s, record.engine_decode_s = (
            queue,
            prefill,
            decode,
        )
    record.input_tokens = _count(attrs.get(names.GEN_AI_USAGE_INPUT_TOKENS))
    record.output_tokens = _count(attrs.get(names.GEN_AI_USAGE_OUTPUT_TOKENS))


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
