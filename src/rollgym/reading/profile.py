"""``rollgym traces profile RUN``: where a run's rollout time went, from its trace store.

Why it reads the store in trace-id order: the ``(trace_id, span_id)`` index hands over one
trace's spans after another, so memory holds one trace at a time (plus a few numbers per
dispatch) however large the run, and a million-span store is read in one pass
(``bench/profile_store.py``). Attributes are parsed only for the spans that carry a split or a
count (client, engine, model-call and dispatch spans). The attribution rule itself lives in
:mod:`rollgym.reading.profile_phases`.

The answer is a plain dict, the same for ``--json`` and the viewer:
``phases`` (a list of ``{name, share, seconds, p50_s, p90_s, p99_s}``, shares summing to 1),
``per_dispatch_name`` (the same per agent / environment), ``http_parts`` (what the ``http``
phase covers, split: profile_http.py), ``stragglers``, ``timeline`` and
``accounting``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import orjson

from rollgym.reading.profile_http import HttpTotals, http_parts
from rollgym.reading.profile_phases import (
    ENGINE_PHASES,
    PHASE_INDEX,
    PHASES,
    SANDBOX,
    DispatchProfile,
    SpanRecord,
    attribute_dispatch,
)
from rollgym.reading.profile_ranges import (
    TraceRange,
    choose_workers,
    range_clause,
    run_over_ranges,
    trace_id_ranges,
)
from rollgym.reading.profile_staleness import policy_staleness
from rollgym.telemetry import names
from rollgym.tracestore.decode import hex_id

#: Attribute of an HTTP client span: seconds it waited for a pooled connection.
CLIENT_QUEUE_KEY = names.HTTP_CLIENT_QUEUE_DURATION
_SECOND = 1e9
_ENGINE_INDEXES = tuple(PHASE_INDEX[p] for p in ENGINE_PHASES)
_SANDBOX_INDEX = PHASE_INDEX[SANDBOX]


def _key(attribute: str) -> str:
    """A JSON path naming one attribute key (keys hold dots, so quoted)."""
    return f'$."{attribute}"'


# SQLite pulls the few attribute values a span kind carries (json_extract, in C): parsing
# every span's JSON in Python cost more than the attribution itself.
_SPANS_IN_TRACE_ORDER = f"""
SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, resource_id,
  CASE WHEN kind = 3 THEN json_extract(attributes, '{_key(CLIENT_QUEUE_KEY)}') END,
  CASE WHEN name = '{names.SPAN_ENGINE_REQUEST}' THEN attributes END,
  CASE WHEN name = '{names.SPAN_MODEL_CHAT}'
    THEN json_extract(attributes, '{_key(names.GEN_AI_USAGE_INPUT_TOKENS)}') END,
  CASE WHEN name = '{names.SPAN_MODEL_CHAT}'
    THEN json_extract(attributes, '{_key(names.GEN_AI_USAGE_OUTPUT_TOKENS)}') END,
  CASE WHEN name = '{names.SPAN_DISPATCH}'
    THEN json_extract(attributes, '{_key(names.ROLLOUT_ADMISSION_WAIT)}') END
FROM spans WHERE {{where}}trace_id IN (SELECT trace_id FROM dispatches) ORDER BY trace_id
"""


@dataclass(slots=True)
class _Dispatch:
    trace_id: bytes
    rollout_id: str | None
    dispatch_name: str
    outcome: str | None


@dataclass(slots=True)
class _Totals:
    """Sums and per-dispatch phase times of one group (the run, or one dispatch name)."""

    per_dispatch_ns: list[list[int]] = field(default_factory=list)
    wall_ns: int = 0

    @property
    def dispatches(self) -> int:
        return len(self.per_dispatch_ns)

    def add(self, profile: DispatchProfile) -> None:
        self.wall_ns += profile.wall_ns
        self.per_dispatch_ns.append(profile.phase_ns)

    def merge(self, other: _Totals) -> None:
        self.wall_ns += other.wall_ns
        self.per_dispatch_ns.extend(other.per_dispatch_ns)

    def phases(self) -> list[dict[str, object]]:
        columns = list(zip(*self.per_dispatch_ns, strict=True)) or [() for _ in PHASES]
        rows = []
        for i, name in enumerate(PHASES):
            values = sorted(columns[i])
            total = sum(values)
            rows.append(
                {
                    "name": name,
                    "share": total / self.wall_ns if self.wall_ns else 0.0,
                    "seconds": total / _SECOND,
                    "p50_s": percentile(values, 0.50) / _SECOND,
                    "p90_s": percentile(values, 0.90) / _SECOND,
                    "p99_s": percentile(values, 0.99) / _SECOND,
                }
            )
        return rows


def percentile(sorted_values: list[int], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _Timeline:
    """Fixed bins over the run: completions per second, mean in flight, and the phase mix of
    the dispatches that ended in each bin (what the rollouts finishing then spent time on).

    In flight is exact (the bin's covered dispatch time over its width) at O(1) a dispatch:
    partial edges are added directly, the whole bins between go to a difference array.
    """

    def __init__(self, start_ns: int, end_ns: int, bins: int) -> None:
        self.start = start_ns
        self.bins = max(1, bins)
        self.width = max(1, math.ceil((end_ns - start_ns) / self.bins))
        self.completed = [0] * self.bins
        self.busy_ns = [0] * self.bins
        self.full = [0] * (self.bins + 1)
        self.phase_ns = [[0] * len(PHASES) for _ in range(self.bins)]

    def _bin(self, t: int) -> int:
        return min(self.bins - 1, max(0, (t - self.start) // self.width))

    def add(self, profile: DispatchProfile) -> None:
        lo, hi = profile.window_start_ns, profile.window_end_ns
        last = self._bin(hi)
        self.completed[last] += 1
        mix = self.phase_ns[last]
        for i, ns in enumerate(profile.phase_ns):
            mix[i] += ns
        if hi <= lo:
            return
        first, last = self._bin(lo), self._bin(hi - 1)
        if first == last:
            self.busy_ns[first] += hi - lo
            return
        self.busy_ns[first] += self.start + (first + 1) * self.width - lo
        self.busy_ns[last] += hi - (self.start + last * self.width)
        self.full[first + 1] += 1
        self.full[last] -= 1

    def merge(self, other: _Timeline) -> None:
        """Add another range's bins (the same start, width and count)."""
        for mine, theirs in (
            (self.completed, other.completed),
            (self.busy_ns, other.busy_ns),
            (self.full, other.full),
        ):
            for i, value in enumerate(theirs):
                mine[i] += value
        for mix, their_mix in zip(self.phase_ns, other.phase_ns, strict=True):
            for i, value in enumerate(their_mix):
                mix[i] += value

    def points(self) -> list[dict[str, object]]:
        seconds = self.width / _SECOND
        points = []
        covering = 0
        for b in range(self.bins):
            covering += self.full[b]
            busy = self.busy_ns[b] + covering * self.width
            mix_total = sum(self.phase_ns[b])
            points.append(
                {
                    "t_s": b * seconds,
                    "width_s": seconds,
                    "completions_per_s": self.completed[b] / seconds,
                    "in_flight": busy / self.width,
                    "phase_mix": {
                        name: (self.phase_ns[b][i] / mix_total if mix_total else 0.0)
                        for i, name in enumerate(PHASES)
                    },
                }
            )
        return points


def open_store(db_path: str | Path) -> apsw.Connection:
    """A read-only apsw connection: its row fetch costs half the standard module's, and the
    profile reads every span of the store once."""
    path = Path(db_path)
    if not path.exists():
        raise FileNotFoundError(f"no trace store at {path}")
    return apsw.Connection(str(path.resolve()), flags=apsw.SQLITE_OPEN_READONLY)


def profile_store(
    db_path: str | Path, *, stragglers: int = 10, bins: int = 60, workers: int | None = None
) -> dict[str, Any]:
    """:func:`profile_run` of the store file at ``db_path`` (FileNotFoundError if none).

    ``workers``: processes reading disjoint trace-id ranges (None: one per core, at most
    :data:`~rollgym.reading.profile_ranges.MAX_WORKERS`, when the store is large enough
    to repay starting them). The answer is the same however many read it.
    """
    conn = open_store(db_path)
    try:
        bounds = _bounds(conn)
        parts = choose_workers(conn, workers)
        staleness = policy_staleness(conn)
        if parts <= 1:
            scan = _scan(conn, bounds, bins, stragglers, None)
            return _report(scan, stragglers, staleness)
        ranges = trace_id_ranges(conn, parts)
    finally:
        conn.close()
    scans = run_over_ranges(
        _scan_range, [(str(Path(db_path)), bounds, bins, stragglers, r) for r in ranges]
    )
    return _report(_merge(scans), stragglers, staleness)


def profile_run(conn: apsw.Connection, *, stragglers: int = 10, bins: int = 60) -> dict[str, Any]:
    """The whole profile of the store behind ``conn`` in this process (module docstring)."""
    scan = _scan(conn, _bounds(conn), bins, stragglers, None)
    return _report(scan, stragglers, policy_staleness(conn))


#: What :class:`_Accounting` sums, in the order the report lists them. A time is summed in
#: ns (``<name>_ns``) and reported in seconds (``<name>_s``).
_ACCOUNTED = (
    "dispatches",
    "input_tokens",
    "output_tokens",
    "model_calls",
    "tool_calls",
    "engine_ns",
    "sandbox_ns",
    "wall_ns",
    "spans",
)
#: The sums a dispatch's profile holds under the same name.
_PROFILE_SUMS = ("input_tokens", "output_tokens", "model_calls", "tool_calls", "wall_ns")


@dataclass(slots=True)
class _Accounting:
    """What the run's dispatches used, summed in whole numbers (times in ns), so the sums of
    disjoint trace-id ranges add up to exactly the one-pass answer."""

    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_ACCOUNTED, 0))

    def add(self, profile: DispatchProfile) -> None:
        sums = self.sums
        sums["dispatches"] += 1
        for name in _PROFILE_SUMS:
            sums[name] += getattr(profile, name)
        phase_ns = profile.phase_ns
        sums["engine_ns"] += sum(phase_ns[i] for i in _ENGINE_INDEXES)
        sums["sandbox_ns"] += phase_ns[_SANDBOX_INDEX]

    def merge(self, other: _Accounting) -> None:
        for name, value in other.sums.items():
            self.sums[name] += value

    def report(self) -> dict[str, int | float]:
        """The report's ``accounting``: counts as counted, times in seconds."""
        report: dict[str, int | float] = {}
        for name, value in self.sums.items():
            if name.endswith("_ns"):
                report[name.removesuffix("_ns") + "_s"] = value / _SECOND
            else:
                report[name] = value
        return report


#: (rollout wall ns, rollout id, dominant phase, dispatch name, trace id hex, outcome)
_Tail = tuple[int, str | None, str, str, str, str | None]


@dataclass(slots=True)
class _Scan:
    """What one pass over a trace-id range found: sums that merge by adding."""

    run: _Totals
    by_name: dict[str, _Totals]
    timeline: _Timeline
    tails: list[_Tail]
    accounting: _Accounting
    #: The ``http`` phase's parts (profile_http.py).
    http: HttpTotals = field(default_factory=HttpTotals)


def _bounds(conn: apsw.Connection) -> tuple[int, int]:
    low, high = next(
        iter(conn.execute("SELECT MIN(start_ns), MAX(start_ns + duration_ns) FROM dispatches"))
    )
    return low or 0, high or 0


def _scan_range(
    db_path: str, bounds: tuple[int, int], bins: int, keep: int, trace_range: TraceRange
) -> _Scan:
    """:func:`_scan` on a connection of its own (what a worker process runs)."""
    conn = open_store(db_path)
    try:
        return _scan(conn, bounds, bins, keep, trace_range)
    finally:
        conn.close()


def _scan(
    conn: apsw.Connection,
    bounds: tuple[int, int],
    bins: int,
    keep: int,
    trace_range: TraceRange | None,
) -> _Scan:
    """Attribute every dispatch whose trace id lies in ``trace_range`` (None: all)."""
    where, params = range_clause(trace_range)
    dispatches = {
        bytes(row[1]): _Dispatch(bytes(row[0]), row[2], row[3] or "unknown", row[4])
        for row in conn.execute(
            "SELECT trace_id, span_id, rollout_id, dispatch_name, outcome FROM dispatches"
            + (f" WHERE {where}" if where else ""),
            params,
        )
    }
    server_kinds = _server_kinds(conn)
    run = _Totals()
    by_name: dict[str, _Totals] = {}
    timeline = _Timeline(bounds[0], bounds[1], bins)
    http = HttpTotals()
    tails: list[_Tail] = []
    accounting = _Accounting()
    dispatch_name = names.SPAN_DISPATCH
    for trace_spans in _traces(conn, server_kinds, where, params):
        accounting.sums["spans"] += len(trace_spans)
        for span in trace_spans:
            if span.name != dispatch_name:
                continue
            info = dispatches.get(span.span_id)
            if info is None:
                continue
            profile = attribute_dispatch(span, trace_spans)
            http.add(http_parts(span, trace_spans))
            run.add(profile)
            by_name.setdefault(info.dispatch_name, _Totals()).add(profile)
            timeline.add(profile)
            accounting.add(profile)
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
    return _Scan(run, by_name, timeline, _slowest(tails, keep), accounting, http)


def _slowest(tails: list[_Tail], keep: int) -> list[_Tail]:
    """The ``keep`` slowest, longest first (ties by trace id, so every split agrees)."""
    return sorted(tails, key=lambda t: (-t[0], t[4]))[: max(0, keep)]


def _merge(scans: list[_Scan]) -> _Scan:
    """One scan of the whole store from scans of disjoint ranges (sums add, lists join)."""
    first, *rest = scans
    for scan in rest:
        first.run.merge(scan.run)
        for name, totals in scan.by_name.items():
            first.by_name.setdefault(name, _Totals()).merge(totals)
        first.timeline.merge(scan.timeline)
        first.tails.extend(scan.tails)
        first.accounting.merge(scan.accounting)
        first.http.merge(scan.http)
    return first


def _report(scan: _Scan, stragglers: int, staleness: dict[str, Any]) -> dict[str, Any]:
    run = scan.run
    return {
        "dispatches": run.dispatches,
        "wall_s": run.wall_ns / _SECOND,
        "phases": run.phases(),
        "per_dispatch_name": [
            {"dispatch_name": name, "dispatches": t.dispatches, "phases": t.phases()}
            for name, t in sorted(scan.by_name.items())
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
            for wall, rollout_id, dominant, name, trace_id, outcome in _slowest(
                scan.tails, stragglers
            )
        ],
        "http_parts": scan.http.report() if run.dispatches else [],
        "timeline": scan.timeline.points() if run.dispatches else [],
        "accounting": scan.accounting.report(),
        "staleness": staleness,
    }


def _server_kinds(conn: apsw.Connection) -> dict[int, str | None]:
    kinds: dict[int, str | None] = {}
    for resource_id, text in conn.execute("SELECT id, attributes FROM resources"):
        try:
            kind = orjson.loads(text).get(names.SERVER_KIND)
        except (orjson.JSONDecodeError, AttributeError):
            kind = None
        kinds[resource_id] = kind if isinstance(kind, str) else None
    return kinds


def _traces(
    conn: apsw.Connection,
    server_kinds: dict[int, str | None],
    where: str = "",
    params: tuple[bytes, ...] = (),
) -> Iterator[list[SpanRecord]]:
    """The spans of every trace holding a dispatch (and matching ``where``), a trace at a
    time."""
    current: bytes | None = None
    batch: list[SpanRecord] = []
    kinds = server_kinds.get
    query = _SPANS_IN_TRACE_ORDER.format(where=f"{where} AND " if where else "")
    for row in conn.execute(query, params):
        trace_id = row[0]
        if trace_id != current:
            if batch:
                yield batch
            batch, current = [], trace_id
        record = SpanRecord(row[1], row[2], row[3], row[4], row[5], row[6], kinds(row[7]))
        if row[8] is not None:
            record.client_queue_s = _seconds(row[8])
        if row[9] is not None:
            _read_engine(record, row[9])
        if row[10] is not None or row[11] is not None:
            record.input_tokens, record.output_tokens = _count(row[10]), _count(row[11])
        if row[12] is not None:
            record.admission_s = _seconds(row[12])
        batch.append(record)
    if batch:
        yield batch


def _read_engine(record: SpanRecord, text: str) -> None:
    """An engine span's split: vLLM's queue / prefill / decode, or derived from TTFT and e2e."""
    try:
        attrs = orjson.loads(text)
    except orjson.JSONDecodeError:
        return
    if not isinstance(attrs, dict):
        return
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


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
