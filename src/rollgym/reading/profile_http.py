"""What the profile's ``http`` phase covers, split into parts a user can act on.

``http`` is the time an HTTP span is the innermost span (see
:mod:`rollgym.reading.profile_phases`): a client span's time its server's span does not
cover, and a server span's time its handler's spans do not cover. The spans say where inside
that time an instant lies, so it splits without guessing:

* ``send``: a client span's own time *before* its server's span began: connecting, writing
  the request, and the request waiting in the server's accept queue or for its busy event
  loop (the pooled-connection wait is ``client_queue``, the dispatch window
  ``admission_wait``: phases of their own);
* ``receive``: a client span's own time *after* its server's span ended: the answer written,
  sent and read back, and the caller's event loop busy elsewhere before it resumed;
* ``server_framework``: a server span's own time outside its handler's spans: routing, reading
  and validating the body, serializing the answer;
* ``untraced_server``: a client span whose server recorded no span at all (a ``url:``
  server, an engine without tracing): its whole time, that server's work included.

Each part comes with what to change (:data:`ADVICE`); ``traces profile`` prints them under the
phase table and ``docs/trace-store.md`` says the same. Where a rollout's calls overlap (an
agent calling two servers at once) a part counts each call's own time, so the parts can sum
to more than the phase: the output says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rollgym.reading.profile_phases import HTTP, SpanRecord, phase_of

SEND = "send"
RECEIVE = "receive"
SERVER_FRAMEWORK = "server_framework"
UNTRACED_SERVER = "untraced_server"
#: Every part, in the order the output shows them.
PARTS: tuple[str, ...] = (SEND, RECEIVE, SERVER_FRAMEWORK, UNTRACED_SERVER)
_INDEX = {name: i for i, name in enumerate(PARTS)}

#: What each part covers and what to change when it is large.
ADVICE: dict[str, tuple[str, str]] = {
    SEND: (
        "connect, write the request, the server's accept queue / busy event loop before its "
        "span began",
        "the server is saturated: add replicas (servers.<name>.replicas) or lower "
        "run.concurrency; a server doing CPU work in its event loop delays every request",
    ),
    RECEIVE: (
        "the answer sent and read back, the caller's event loop busy before it resumed",
        "the caller (driver or agent) is CPU-bound: lower run.concurrency, add agent "
        "replicas, or shrink answers (token capture and long trajectories are large)",
    ),
    SERVER_FRAMEWORK: (
        "inside the server, outside its handler's spans: routing, body parse and "
        "validation, answer serialization",
        "large bodies cost here: send fewer or smaller fields; see the server's own spans",
    ),
    UNTRACED_SERVER: (
        "calls to a server that recorded no span: its whole time, its work included",
        "trace that server (docs/telemetry.md) to split this time into its parts",
    ),
}

if TYPE_CHECKING:
    from rich.console import Console

_KIND_SERVER = 2
_SECOND = 1_000_000_000


#: (name, kind, server kind) -> whether the span's own time is ``http`` (phase_of is a pure
#: function of the three; a profile asks once a span).
_HTTP_CACHE: dict[tuple[str, int, str | None], bool] = {}


def _is_http(span: SpanRecord) -> bool:
    key = (span.name, span.kind, span.server_kind)
    found = _HTTP_CACHE.get(key)
    if found is None:
        found = _HTTP_CACHE[key] = phase_of(span) == HTTP
    return found


def _own(lo: int, hi: int, covered: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[lo, hi)`` minus the union of ``covered``, as sorted intervals."""
    pieces: list[tuple[int, int]] = []
    cursor = lo
    for start, end in sorted(covered):
        if start > cursor:
            pieces.append((cursor, min(start, hi)))
        cursor = max(cursor, end)
        if cursor >= hi:
            break
    if cursor < hi:
        pieces.append((cursor, hi))
    return [(a, b) for a, b in pieces if b > a]


def _overlap(pieces: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in pieces)


def http_parts(root: SpanRecord, spans: Iterable[SpanRecord]) -> list[int]:
    """Nanoseconds of each part (indexed like :data:`PARTS`) in dispatch ``root``'s subtree
    (spans clipped to their parent like the attribution; a span whose parent is not in the
    trace hangs under ``root``)."""
    listed = list(spans)
    known = {s.span_id for s in listed} | {root.span_id}
    children: dict[bytes, list[SpanRecord]] = {}
    for span in listed:
        if span.parent_id is None or span.span_id == root.span_id:
            continue
        parent = span.parent_id if span.parent_id in known else root.span_id
        children.setdefault(parent, []).append(span)
    parts = [0] * len(PARTS)
    stack = [(root, root.start_ns, max(root.start_ns, root.end_ns))]
    while stack:
        span, lo, hi = stack.pop()
        kids: list[tuple[int, int, SpanRecord]] = []
        for kid in children.get(span.span_id, ()):
            klo, khi = max(lo, kid.start_ns), min(hi, kid.end_ns)
            if khi > klo:
                kids.append((klo, khi, kid))
                stack.append((kid, klo, khi))
        if span is root or not _is_http(span):
            continue
        covered = [(a, b) for a, b, _ in kids]
        if span.client_queue_s and span.kind != _KIND_SERVER:  # the pool wait: client_queue
            covered.append((lo, min(hi, lo + int(span.client_queue_s * _SECOND))))
        own = _own(lo, hi, covered)
        if span.kind == _KIND_SERVER:
            parts[_INDEX[SERVER_FRAMEWORK]] += _overlap(own, lo, hi)
            continue
        served = [(a, b) for a, b, kid in kids if kid.kind == _KIND_SERVER]
        if not served:
            parts[_INDEX[UNTRACED_SERVER]] += _overlap(own, lo, hi)
            continue
        last = max(b for _, b in served)
        # before the last answer began to come back (between two answers: sending again)
        parts[_INDEX[SEND]] += _overlap(own, lo, last)
        parts[_INDEX[RECEIVE]] += _overlap(own, last, hi)
    return parts


class HttpTotals:
    """The parts summed over many dispatches (one profile scan, or several merged)."""

    def __init__(self) -> None:
        self.ns = [0] * len(PARTS)

    def add(self, parts: list[int]) -> None:
        for i, value in enumerate(parts):
            self.ns[i] += value

    def merge(self, other: HttpTotals) -> None:
        self.add(other.ns)

    def report(self) -> list[dict[str, object]]:
        """One row a part: seconds, share of the parts' sum, what it covers, what to change."""
        total = sum(self.ns)
        return [
            {
                "name": name,
                "seconds": self.ns[i] / _SECOND,
                "share": self.ns[i] / total if total else 0.0,
                "covers": ADVICE[name][0],
                "change": ADVICE[name][1],
            }
            for i, name in enumerate(PARTS)
        ]


def print_http_parts(console: Console, report: dict[str, Any]) -> None:
    """The ``http`` phase's parts under the phase table, each with what to change."""
    parts = report.get("http_parts")
    if not parts:
        return
    phase = next((p for p in report.get("phases", []) if p.get("name") == HTTP), None)
    total = sum(float(part["seconds"]) for part in parts)
    if phase is None or total <= 0:
        return
    console.print(
        f"[bold]http[/] ({100 * float(phase['share']):.1f}% of rollout time) is time an HTTP "
        "span is the innermost one: a call on the wire or in a server's framework, outside "
        "any handler span. Its parts (overlapping calls each count):"
    )
    for part in sorted(parts, key=lambda p: -float(p["seconds"])):
        console.print(
            f"  {part['name']:<17} {100 * float(part['share']):5.1f}%  "
            f"{float(part['seconds']):.3f} s  {part['covers']}"
        )
        if float(part["share"]) >= 0.05:
            console.print(f"  {'':<17} [dim]to change it: {part['change']}[/]")
