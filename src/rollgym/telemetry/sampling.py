"""Samplers by their standard names, and the single-trace id generator.

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
