"""Where one dispatch's wall time went: its spans' intervals attributed to phases.

Why a module of its own, with no SQL in it: the attribution rule is the part people must be
able to trust, so it is a pure function of span records, tested on hand-built traces with
known answers; :mod:`rollgym.tracestore.profile` feeds it from a store.

The rule (also in ``docs/telemetry.md``, "Where the time went"):

* A dispatch's window is its ``gym.rollout.dispatch`` span, extended backwards by the
  admission wait the driver recorded on it (``gym.rollout.admission_wait``, seconds).
* Every span of the dispatch's subtree is clipped to its parent's (clipped) interval, so a
  child that outlives its parent (clock skew between processes) never counts twice.
* At every instant of the window exactly one span owns the time: the innermost (deepest)
  span covering it; between overlapping siblings, the one that started last. A phase's time is
  the union of the intervals its spans own, so the phases tile the window and their shares
  sum to 1.
* Some spans say how their own time splits: an HTTP client span carries the time it waited
  for a pooled connection (``gym.http.client.queue_duration``), counted from its start as
  ``client_queue``; an engine span (vLLM's ``llm_request``) carries ``time_in_queue``,
  ``time_in_model_prefill`` and ``time_in_model_decode`` (or time to first token and end to
  end, from which prefill and decode follow), laid end to end from its start as
  ``engine_queue``, ``engine_prefill``, ``engine_decode``. These are leaves one level below
  the span that reported them; what they leave of it keeps that span's own phase.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rollgym.telemetry import names

ADMISSION_WAIT = "admission_wait"
CLIENT_QUEUE = "client_queue"
HTTP = "http"
AGENT = "agent"
MODEL_SERVER = "model_server"
ENGINE_QUEUE = "engine_queue"
ENGINE_PREFILL = "engine_prefill"
ENGINE_DECODE = "engine_decode"
TOOLS = "tools"
SANDBOX = "sandbox"
VERIFY = "verify"
COLLECTOR = "collector"
UNATTRIBUTED = "unattributed"

#: Every phase, in the order tables and plots show them.
PHASES: tuple[str, ...] = (
    ADMISSION_WAIT,
    CLIENT_QUEUE,
    HTTP,
    AGENT,
    MODEL_SERVER,
    ENGINE_QUEUE,
    ENGINE_PREFILL,
    ENGINE_DECODE,
    TOOLS,
    SANDBOX,
    VERIFY,
    COLLECTOR,
    UNATTRIBUTED,
)
PHASE_INDEX = {name: i for i, name in enumerate(PHASES)}
#: Phases that are the engine's own time (``engine_s`` in the accounting).
ENGINE_PHASES = (ENGINE_QUEUE, ENGINE_PREFILL, ENGINE_DECODE)

_KIND_SERVER = 2
_KIND_CLIENT = 3
_SECOND = 1_000_000_000
_BY_NAME = {
    names.SPAN_DISPATCH: COLLECTOR,
    names.SPAN_ROLLOUT: AGENT,
    # The agent's side of a model call (SDK, (de)serialization); the hop below it is HTTP.
    names.SPAN_MODEL_CHAT: AGENT,
    names.SPAN_ENGINE_REQUEST: MODEL_SERVER,
    names.SPAN_ENV_TOOL: TOOLS,
    names.SPAN_ENV_SEED: TOOLS,
    names.SPAN_VERIFY: VERIFY,
    names.SPAN_SANDBOX_CREATE: SANDBOX,
    names.SPAN_SANDBOX_EXEC: SANDBOX,
    names.SPAN_SANDBOX_DESTROY: SANDBOX,
}


@dataclass(slots=True)
class SpanRecord:
    """What attribution needs of one span (times in ns since the epoch, splits in seconds)."""

    span_id: bytes
    parent_id: bytes | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    #: ``gym.server.kind`` of the process that emitted it (``model``, ``agent``, ...).
    server_kind: str | None = None
    client_queue_s: float | None = None
    engine_queue_s: float | None = None
    engine_prefill_s: float | None = None
    engine_decode_s: float | None = None
    admission_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


def phase_of(span: SpanRecord) -> str:
    """The phase a span's own time belongs to (module docstring); unknown spans: unattributed."""
    by_name = _BY_NAME.get(span.name)
    if by_name is not None:
        return by_name
    if span.kind == _KIND_CLIENT:
        return HTTP
    if span.server_kind == "model":
        return MODEL_SERVER
    if span.kind == _KIND_SERVER:
        return HTTP
    return UNATTRIBUTED


@dataclass(slots=True)
class DispatchProfile:
    """One dispatch's window and the nanoseconds each phase owned (indexed like PHASES)."""

    window_start_ns: int
    window_end_ns: int
    phase_ns: list[int]
    #: (start_ns, end_ns, phase index) pieces tiling the window, oldest first.
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    @property
    def wall_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    def dominant_phase(self) -> str:
        best = max(range(len(PHASES)), key=lambda i: self.phase_ns[i])
        return PHASES[best]


def _leaves(span: SpanRecord, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
    """The splits a span reports of its own time, laid end to end from its start."""
    if span.client_queue_s is not None and span.kind == _KIND_CLIENT:
        yield lo, min(hi, lo + int(span.client_queue_s * _SECOND)), CLIENT_QUEUE
    if span.name == names.SPAN_ENGINE_REQUEST:
        cursor = lo
        for seconds, phase in (
            (span.engine_queue_s, ENGINE_QUEUE),
            (span.engine_prefill_s, ENGINE_PREFILL),
            (span.engine_decode_s, ENGINE_DECODE),
        ):
            if seconds is None or seconds <= 0:
                continue
            end = min(hi, cursor + int(seconds * _SECOND))
            yield cursor, end, phase
            cursor = end


def attribute_dispatch(root: SpanRecord, spans: Iterable[SpanRecord]) -> DispatchProfile:
    """Attribute the window of dispatch ``root`` over ``spans`` (its trace, any order).

    Spans outside ``root``'s subtree are ignored; a span whose parent is not in the trace is
    taken as a child of ``root`` (its parent was dropped by a full export queue).
    """
    by_id = {s.span_id: s for s in spans}
    by_id[root.span_id] = root
    children: dict[bytes, list[SpanRecord]] = {}
    for span in by_id.values():
        if span is root:
            continue
        parent = span.parent_id
        if parent is None:  # another root of the trace (single-trace mode): not this one's
            continue
        if parent not in by_id:
            parent = root.span_id
        children.setdefault(parent, []).append(span)
    admission = int((root.admission_s or 0.0) * _SECOND)
    lo0, hi0 = root.start_ns - max(0, admission), max(root.start_ns, root.end_ns)
    # (lo, hi, depth, phase index) of every node, each clipped to its parent's interval.
    nodes: list[tuple[int, int, int, int]] = [(lo0, hi0, 0, PHASE_INDEX[COLLECTOR])]
    if admission > 0:
        nodes.append((lo0, root.start_ns, 1, PHASE_INDEX[ADMISSION_WAIT]))
    profile = DispatchProfile(lo0, hi0, [0] * len(PHASES))
    stack: list[tuple[SpanRecord, int, int, int]] = [(root, root.start_ns, hi0, 0)]
    seen = {root.span_id}
    while stack:
        span, plo, phi, depth = stack.pop()
        for child in children.get(span.span_id, ()):
            if child.span_id in seen:  # a malformed parent cycle
                continue
            seen.add(child.span_id)
            lo, hi = max(plo, child.start_ns), min(phi, child.end_ns)
            _count(profile, child)
            if hi <= lo:
                continue
            nodes.append((lo, hi, depth + 1, PHASE_INDEX[phase_of(child)]))
            for llo, lhi, phase in _leaves(child, lo, hi):
                if lhi > llo:
                    nodes.append((llo, lhi, depth + 2, PHASE_INDEX[phase]))
            stack.append((child, lo, hi, depth + 1))
    _sweep(nodes, profile)
    return profile


def _count(profile: DispatchProfile, span: SpanRecord) -> None:
    if span.name == names.SPAN_MODEL_CHAT:
        profile.model_calls += 1
        profile.input_tokens += span.input_tokens or 0
        profile.output_tokens += span.output_tokens or 0
    elif span.name == names.SPAN_ENV_TOOL:
        profile.tool_calls += 1


def _sweep(nodes: list[tuple[int, int, int, int]], profile: DispatchProfile) -> None:
    """Innermost-wins over the clipped nodes: one owner per instant, pieces into ``profile``."""
    events: list[tuple[int, int, int]] = []
    for index, (lo, hi, _depth, _phase) in enumerate(nodes):
        events.append((lo, 1, index))
        events.append((hi, 0, index))
    events.sort()
    active = [False] * len(nodes)
    heap: list[tuple[int, int, int]] = []
    phase_ns = profile.phase_ns
    segments = profile.segments
    previous: int | None = None
    for time_ns, is_start, index in events:
        if previous is not None and time_ns > previous:
            while not active[heap[0][2]]:
                heapq.heappop(heap)
            phase = nodes[heap[0][2]][3]
            phase_ns[phase] += time_ns - previous
            if segments and segments[-1][1] == previous and segments[-1][2] == phase:
                segments[-1] = (segments[-1][0], time_ns, phase)
            else:
                segments.append((previous, time_ns, phase))
        if is_start:
            lo, _hi, depth, _phase = nodes[index]
            active[index] = True
            heapq.heappush(heap, (-depth, -lo, index))
        else:
            active[index] = False
        previous = time_ns
