"""Where one dispatch's wall time went: its spans' intervals attributed to phases.

Why a module of its own, with no SQL in it: the attribution rule is the part people must be
able to trust, so it is a pure function of span records, tested on hand-built traces with
known answers; :mod:`rollgym.reading.profile` feeds it from a store.

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
from dataclasses import dataclass

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


#: A node of the clipped tree: (lo, hi, depth, phase index, children).
_Node = tuple[int, int, int, int, list["_Node"]]
_COLLECTOR_INDEX = PHASE_INDEX[COLLECTOR]
_ADMISSION_INDEX = PHASE_INDEX[ADMISSION_WAIT]
_COUNTED = frozenset((names.SPAN_MODEL_CHAT, names.SPAN_ENV_TOOL))
#: (name, kind, server kind) -> phase index: phase_of is a pure function of these three.
_PHASE_CACHE: dict[tuple[str, int, str | None], int] = {}


def _leaves(span: SpanRecord, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """The splits a span reports of its own time, laid end to end from its start."""
    if span.client_queue_s is not None and span.kind == _KIND_CLIENT:
        yield lo, min(hi, lo + int(span.client_queue_s * _SECOND)), PHASE_INDEX[CLIENT_QUEUE]
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
            yield cursor, end, PHASE_INDEX[phase]
            cursor = end


def attribute_dispatch(
    root: SpanRecord, spans: Iterable[SpanRecord], *, sweep: bool = False
) -> DispatchProfile:
    """Attribute the window of dispatch ``root`` over ``spans`` (its trace, any order).

    Spans outside ``root``'s subtree are ignored; a span whose parent is not in the trace is
    taken as a child of ``root`` (its parent was dropped by a full export queue).
    ``sweep``: always take the general path (tests compare it with the fast one).
    """
    children = _children(root, spans if isinstance(spans, list) else list(spans))
    admission = max(0, int((root.admission_s or 0.0) * _SECOND))
    lo0, hi0 = root.start_ns - admission, max(root.start_ns, root.end_ns)
    profile = DispatchProfile(lo0, hi0, [0] * len(PHASES))
    if not sweep and _fast(root, children, admission, profile):
        return profile
    profile = DispatchProfile(lo0, hi0, [0] * len(PHASES))
    _sweep(_tree(root, children, admission, profile), profile.phase_ns)
    return profile


def _children(root: SpanRecord, spans: list[SpanRecord]) -> dict[bytes, list[SpanRecord]]:
    known = {s.span_id for s in spans}
    known.add(root.span_id)
    children: dict[bytes, list[SpanRecord]] = {}
    root_id = root.span_id
    for span in spans:
        parent = span.parent_id
        if parent is None or span.span_id == root_id:
            continue  # another root of the trace (single-trace mode), or root itself
        if parent not in known:
            parent = root_id
        kids = children.get(parent)
        if kids is None:
            children[parent] = [span]
        else:
            kids.append(span)
    return children


def _phase_index(span: SpanRecord) -> int:
    key = (span.name, span.kind, span.server_kind)
    phase = _PHASE_CACHE.get(key)
    if phase is None:
        phase = _PHASE_CACHE[key] = PHASE_INDEX[phase_of(span)]
    return phase


def _start(span: SpanRecord) -> int:
    return span.start_ns


def _fast(
    root: SpanRecord,
    children: dict[bytes, list[SpanRecord]],
    admission: int,
    profile: DispatchProfile,
) -> bool:
    """One pass for the common tree, where no two siblings (nor a child and its parent's
    reported split) overlap: then the innermost span at every instant is found by subtracting
    each node's children from it. False as soon as an overlap shows (the sweep decides)."""
    phase_ns = profile.phase_ns
    hi0 = max(root.start_ns, root.end_ns)
    phase_ns[_COLLECTOR_INDEX] += hi0 - root.start_ns
    phase_ns[_ADMISSION_INDEX] += admission
    stack = [(root, root.start_ns, hi0, _COLLECTOR_INDEX, root.start_ns)]
    while stack:
        span, plo, phi, parent_phase, busy_until = stack.pop()
        kids = children.get(span.span_id)
        if not kids:
            continue
        kids.sort(key=_start)
        end, taken = busy_until, 0
        for kid in kids:
            name = kid.name
            if name in _COUNTED:
                _count(profile, kid)
            start, stop = kid.start_ns, kid.end_ns
            lo = plo if plo > start else start
            hi = phi if phi < stop else stop
            if hi <= lo:
                continue
            if lo < end:
                return False
            end = hi
            taken += hi - lo
            own, leaf_end = hi - lo, lo
            if kid.client_queue_s is not None or name == names.SPAN_ENGINE_REQUEST:
                for llo, lhi, leaf in _leaves(kid, lo, hi):
                    if lhi > llo:
                        phase_ns[leaf] += lhi - llo
                        own -= lhi - llo
                        leaf_end = lhi
            phase = _phase_index(kid)
            phase_ns[phase] += own
            if kid.span_id in children:
                stack.append((kid, lo, hi, phase, leaf_end))
        phase_ns[parent_phase] -= taken
    return True


def _tree(
    root: SpanRecord,
    children: dict[bytes, list[SpanRecord]],
    admission: int,
    profile: DispatchProfile,
) -> _Node:
    """The clipped tree of ``root``: every child cut to its parent's (clipped) interval, each
    reported split a leaf one level below its span."""
    lo0, hi0 = profile.window_start_ns, profile.window_end_ns
    top: _Node = (lo0, hi0, 0, _COLLECTOR_INDEX, [])
    if admission > 0:
        top[4].append((lo0, root.start_ns, 1, _ADMISSION_INDEX, []))
    # The root's children are clipped to the dispatch span itself, not the admission wait.
    stack: list[tuple[SpanRecord, _Node]] = [(root, (root.start_ns, hi0, 0, 0, top[4]))]
    while stack:
        span, node = stack.pop()
        plo, phi, depth = node[0], node[1], node[2]
        for child in children.get(span.span_id, ()):
            if child.name in _COUNTED:
                _count(profile, child)
            lo, hi = max(plo, child.start_ns), min(phi, child.end_ns)
            if hi <= lo:
                continue
            child_node: _Node = (lo, hi, depth + 1, _phase_index(child), [])
            for llo, lhi, leaf in _leaves(child, lo, hi):
                if lhi > llo:
                    child_node[4].append((llo, lhi, depth + 2, leaf, []))
            node[4].append(child_node)
            stack.append((child, child_node))
    return top


def _count(profile: DispatchProfile, span: SpanRecord) -> None:
    if span.name == names.SPAN_MODEL_CHAT:
        profile.model_calls += 1
        profile.input_tokens += span.input_tokens or 0
        profile.output_tokens += span.output_tokens or 0
    elif span.name == names.SPAN_ENV_TOOL:
        profile.tool_calls += 1


def _sweep(top: _Node, phase_ns: list[int]) -> None:
    """Innermost-wins over every node: one owner per instant (the deepest; the later start
    between equals)."""
    nodes: list[_Node] = []
    stack = [top]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node[4])
    events: list[tuple[int, int, int]] = []
    for index, node in enumerate(nodes):
        events.append((node[0], 1, index))
        events.append((node[1], 0, index))
    events.sort()
    active = [False] * len(nodes)
    heap: list[tuple[int, int, int]] = []
    previous: int | None = None
    for time_ns, is_start, index in events:
        if previous is not None and time_ns > previous:
            while not active[heap[0][2]]:
                heapq.heappop(heap)
            phase_ns[nodes[heap[0][2]][3]] += time_ns - previous
        if is_start:
            node = nodes[index]
            active[index] = True
            heapq.heappush(heap, (-node[2], -node[0], index))
        else:
            active[index] = False
        previous = time_ns
