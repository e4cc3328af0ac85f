"""A larger young-generation GC threshold while a tracer provider rollgym built records here.

Why (measured, ``bench/tracing_overhead.py`` rounds with ``gc.callbacks`` timing every
collection): with 64 rollouts in flight the driver's youngest generation already holds about
5,000 live objects (coroutines, futures, aiohttp request state) that a young collection walks
and cannot free. A traced rollout adds a few short-lived tracked objects (two spans, their
``SpanContext`` s and ``Context`` s, the context tokens), which at CPython's default threshold
of 700 allocations made the traced driver run 3-4 times as many young collections as the
untraced one (73 vs 18 per 4,000 rollouts): 9-17 µs of collector time per rollout on
rollgym's own pipeline, 34-45 µs on the SDK's, against 1-3 µs untraced. With the threshold at
:data:`YOUNG_THRESHOLD` the same rounds run one or two collections and the traced driver's
CPU per rollout drops by about that much (SDK pipeline: 333 -> 311 µs), while the untraced
driver is unchanged by it (137 vs 141 µs), so it is applied only where spans are recorded:
by :func:`~rollgym.telemetry.setup.setup_telemetry` when it builds a provider (rollgym's
pipeline or the SDK's), never for an embedder's provider, released at the handle's shutdown.

What it costs: cyclic garbage waits for up to :data:`YOUNG_THRESHOLD` net allocations instead
of 700 before it is freed (a few MB at most); nothing else changes. Only the young threshold
is raised (never lowered); the older generations keep theirs. It is held while at least one
pipeline is set up and put back when the last one shuts down, unless someone else changed the
thresholds meanwhile (then theirs stay). A process whose collector is disabled is left alone.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["YOUNG_THRESHOLD", "hold", "release"]

#: Young-generation threshold while a pipeline records (CPython's default is 700). Measured
#: in ``bench/tracing_overhead.py`` rounds: 2,000 / 5,000 / 10,000 / 50,000 gave 12 / 4 / 1 /
#: 0 collections per 4,000 traced rollouts; 10,000 already leaves the collector's share near
#: zero, and larger values only let cyclic garbage wait longer.
YOUNG_THRESHOLD = 10_000


class _Holds:
    """Who holds the raised threshold: one per process, as the thresholds themselves are."""

    __slots__ = ("lock", "count", "saved", "set")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        #: Thresholds before the first hold, and the ones it set (to see if they were changed).
        self.saved: tuple[int, ...] | None = None
        self.set: tuple[int, ...] | None = None


_holds = _Holds()


def hold(threshold: int = YOUNG_THRESHOLD) -> None:
    """Raise the young threshold to ``threshold`` (if lower) until the matching :func:`release`."""
    holds = _holds
    with holds.lock:
        holds.count += 1
        if holds.count > 1 or not gc.isenabled():
            return
        current = gc.get_threshold()
        if current[0] == 0 or current[0] >= threshold:  # 0: automatic collection is off
            return
        holds.saved = current
        gc.set_threshold(threshold, *current[1:])
        holds.set = gc.get_threshold()


def release() -> None:
    """Undo one :func:`hold`; the last one puts the saved thresholds back if still ours."""
    holds = _holds
    with holds.lock:
        if holds.count == 0:
            return
        holds.count -= 1
        if holds.count > 0 or holds.saved is None:
            return
        if gc.get_threshold() == holds.set:
            gc.set_threshold(*holds.saved)
        holds.saved = holds.set = None
