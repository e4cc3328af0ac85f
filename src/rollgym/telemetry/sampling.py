"""Samplers by their standard names, and the trace id generators rollgym's tracers use.

Trace ids rollgym makes are time-ordered: the first 4 bytes are the second the trace began
(seconds since the epoch, big-endian, as AWS X-Ray's ids are), the other 12 random. Why: a
trace store indexes spans by trace id, and random ids put every new span at a random place in
that index, so each span dirties a different page and, once the index outgrows memory, costs a
read; time-ordered ids put new spans near each other at the end (``bench/trace_id_order.py``,
a store grown to 2,000,000 spans: 5.2 vs 7.3 µs of writer CPU a span, ``docs/benchmarks.md``). The W3C format allows any non-zero
16 bytes, and ratio samplers keep their meaning: ``TraceIdRatioBased`` decides on the low 64
bits, which stay random. Spans of a rollout that other processes make (servers, engines, an
OpenAI-SDK agent) share its trace id, so they are ordered too.

Every dispatch is a trace root, so a ratio sampler decides per rollout; the ``gym.job`` span a
rollout links to gets its own decision and may be unsampled (the link then points at a span the
backend never received: documented in ``docs/telemetry.md``).

Single-trace mode gives every root the run's trace id. The SDK asks the id generator for a
trace id only when a span has no valid parent, so returning one fixed id from
``generate_trace_id`` is exactly "every root joins the run's trace". The result is one trace
that grows with the run: unbounded, for small debugging runs only.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)

_log = logging.getLogger(__name__)


def make_sampler(name: str | None, arg: str | None) -> Sampler | None:
    """The sampler named like ``OTEL_TRACES_SAMPLER``; None means the SDK default."""
    if not name:
        return None
    key = name.strip().lower()
    fixed = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "parentbased_always_on": DEFAULT_ON,
        "parentbased_always_off": DEFAULT_OFF,
    }
    if key in fixed:
        return fixed[key]
    if key in ("traceidratio", "parentbased_traceidratio"):
        try:
            rate = float(arg) if arg else 1.0
        except ValueError:
            _log.warning("sampler argument %r is not a number; using 1.0", arg)
            rate = 1.0
        return TraceIdRatioBased(rate) if key == "traceidratio" else ParentBasedTraceIdRatio(rate)
    _log.warning("unknown sampler %r; using parentbased_always_on", name)
    return DEFAULT_ON


_getrandbits = random.getrandbits
_time = time.time


def time_ordered_trace_id() -> int:
    """A new trace id: the current second in the top 32 bits, 96 random bits below."""
    return (int(_time()) & 0xFFFFFFFF) << 96 | _getrandbits(96)


def random_span_id() -> int:
    """A new span id: 64 random bits, never zero (zero is the invalid id)."""
    span_id = _getrandbits(64)
    while span_id == 0:
        span_id = _getrandbits(64)
    return span_id


class TimeOrderedIdGenerator(IdGenerator):
    """Time-ordered trace ids (see the module's docstring), random span ids."""

    def generate_span_id(self) -> int:
        return random_span_id()

    def generate_trace_id(self) -> int:
        return time_ordered_trace_id()


def run_trace_id(run_id: str) -> int:
    """The run's fixed trace id, derived from the run id so every process agrees on it."""
    value = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big")
    return value or 1


class SingleTraceIdGenerator(IdGenerator):
    """Roots get the run's trace id; span ids stay random."""

    def __init__(self, trace_id: int) -> None:
        self._trace_id = trace_id
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._trace_id
