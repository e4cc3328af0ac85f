"""Tail sampling: whether a rollout attempt's trace is kept, decided when the attempt ends.

A head sampler (``telemetry.sampler``) decides when a trace begins, before anyone knows how it
went, so a 10% sample keeps 10% of the failures too, and the failures are what people open.
Here the driver decides when each attempt's answer is in, from its outcome, and the reasons
are tried in this order (the first that holds is the one counted):

* ``timeout``: the attempt ran out of time;
* ``failed``: it failed any other way, or a model answer in it came back incomplete;
* ``stale``: it ran on a policy version more than ``max_staleness`` behind (a stale attempt);
* ``slow``: its duration is at or above the ``slow_percentile`` of the durations of the
  attempts that ended before it (a running percentile over the last ``window`` of them, so
  the decision never waits for the run to end; judged from the ``min_samples``-th on);
* ``reward``: its reward is outside ``reward_band`` (``[low, high]``, both kept inside);
* ``share``: the trace id falls in the kept ``share`` of the rest, decided on the trace id's
  low 64 bits (random in rollgym's time-ordered ids) as a ratio sampler does, so the same id
  always gets the same answer.

Anything else is dropped. The decision covers the attempt's whole trace, in every process:
the driver marks the row ``trace_sampled: false`` and hands the trace id to the run's trace
store, which removes every span of it (``docs/design/tail-sampling.md``). Counts are exact:
every decided attempt is counted once, kept by its reason or dropped.

With ``queue_decisions``, each decision also waits in a queue, with the moment it was taken,
for the run's tail stream (:mod:`rollgym.tracestore.tail_stream`) to take once the grace
period has passed (:meth:`TailSampler.due`): it forwards kept traces and removes dropped ones
while the run goes. The queue holds about a grace period's decisions (20 bytes and a tuple
each), never the run's.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Final, Literal

from rollgym.rewards import is_reward

TailReason = Literal["timeout", "failed", "stale", "slow", "reward", "share"]
#: The reasons in the order they are tried (also the order summary.json lists them).
REASONS: Final[tuple[TailReason, ...]] = ("timeout", "failed", "stale", "slow", "reward", "share")
_RATIO_BOUND: Final = 1 << 64
#: The grace added to two exporter delays (see :func:`grace_after`), in seconds.
GRACE_MARGIN_S: Final = 1.0


def grace_after(schedule_delay_ms: float) -> float:
    """How long after a decision a trace's spans from every process are in the store: a span
    ends, waits up to one schedule delay in its process's queue and up to one more in its
    exporter child's batch, then one request to the store (the margin). A span later than
    that is still handled exactly (a later round, or the end of the run), only apart."""
    return 2 * max(schedule_delay_ms, 0.0) / 1000 + GRACE_MARGIN_S


@dataclass(frozen=True)
class TailPolicy:
    """What a tail-sampled run keeps besides every failure (see the module docstring)."""

    share: float = 0.1
    slow_percentile: float | None = 99.0
    reward_band: tuple[float, float] | None = None
    window: int = 1000
    min_samples: int = 20


@dataclass(frozen=True)
class AttemptEnd:
    """What the decision reads of one ended attempt."""

    trace_id: str
    timed_out: bool = False
    failed: bool = False
    stale: bool = False
    duration_s: float = 0.0
    reward: float | None = None


class RunningPercentile:
    """The ``percentile`` of the last ``window`` values added, in O(window) memory.

    Kept sorted (bisect) beside the arrival order, so a query is an index and an add is
    O(window) at worst: 1,000 floats, a few microseconds.
    """

    def __init__(self, percentile: float, window: int) -> None:
        self._fraction = min(max(percentile, 0.0), 100.0) / 100.0
        self._order: deque[float] = deque()
        self._sorted: list[float] = []
        self._window = max(1, window)

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, value: float) -> None:
        if len(self._order) == self._window:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._order.append(value)
        bisect.insort(self._sorted, value)

    def value(self) -> float | None:
        """The nearest-rank percentile of the values held; None when there are none."""
        if not self._sorted:
            return None
        rank = max(0, min(len(self._sorted) - 1, int(self._fraction * len(self._sorted))))
        return self._sorted[rank]


class TailSampler:
    """Decides each ended attempt's trace (:meth:`decide`) and counts every decision.

    The dropped trace ids are kept packed (16 bytes each, one ``bytearray``: a million dropped
    rollouts hold 16 MB) until the run hands them to its store.
    """

    def __init__(self, policy: TailPolicy, *, queue_decisions: bool = False) -> None:
        if not 0.0 <= policy.share <= 1.0:
            raise ValueError(f"share must be between 0 and 1, got {policy.share!r}")
        self.policy = policy
        self._share_bound = int(policy.share * _RATIO_BOUND)
        self._slow = (
            RunningPercentile(policy.slow_percentile, policy.window)
            if policy.slow_percentile is not None
            else None
        )
        self.kept: Counter[TailReason] = Counter()
        self.dropped = 0
        self._dropped_ids = bytearray()
        #: (monotonic time of the decision, trace id, kept), oldest first; None: not queued.
        self._decisions: deque[tuple[float, bytes, bool]] | None = (
            deque() if queue_decisions else None
        )

    def reason(self, end: AttemptEnd) -> TailReason | None:
        """Why ``end``'s trace is kept, or None when it is dropped (counts nothing)."""
        if end.timed_out:
            return "timeout"
        if end.failed:
            return "failed"
        if end.stale:
            return "stale"
        slow = self._slow
        if slow is not None and len(slow) >= self.policy.min_samples:
            threshold = slow.value()
            if threshold is not None and end.duration_s >= threshold:
                return "slow"
        band, reward = self.policy.reward_band, end.reward
        if band is not None and is_reward(reward) and not band[0] <= reward <= band[1]:
            return "reward"
        if self._in_share(end.trace_id):
            return "share"
        return None

    def decide(self, end: AttemptEnd) -> bool:
        """Keep (True) or drop ``end``'s trace; counted once, and its duration remembered."""
        why = self.reason(end)
        if self._slow is not None and not (end.timed_out or end.failed):
            self._slow.add(end.duration_s)
        trace_id = _trace_id_bytes(end.trace_id)  # None: not a trace id, no store has it
        if trace_id is not None and self._decisions is not None:
            self._decisions.append((time.monotonic(), trace_id, why is not None))
        if why is None:
            self.dropped += 1
            if trace_id is not None:
                self._dropped_ids += trace_id
            return False
        self.kept[why] += 1
        return True

    def due(self, before: float) -> list[tuple[bytes, bool]]:
        """The queued decisions taken at or before ``before`` (monotonic seconds), oldest
        first, as (trace id, kept), each handed out once. Called from the tail stream's
        thread while the event loop's :meth:`decide` appends: a deque's append and popleft
        are atomic, and this is its one consumer."""
        queue = self._decisions
        out: list[tuple[bytes, bool]] = []
        if queue is None:
            return out
        while queue and queue[0][0] <= before:
            _, trace_id, kept = queue.popleft()
            out.append((trace_id, kept))
        return out

    @property
    def dropped_traces(self) -> list[bytes]:
        """The dropped trace ids (16 bytes each), in the order they were decided."""
        ids = self._dropped_ids
        return [bytes(ids[i : i + 16]) for i in range(0, len(ids), 16)]

    def _in_share(self, trace_id: str) -> bool:
        try:
            low = int(trace_id[-16:], 16)
        except ValueError:
            return True  # no id to decide on: kept, never half-known
        return low < self._share_bound

    def counts(self) -> dict[str, object]:
        """``summary.json``'s ``telemetry.tail_sampling``: attempts (traces) kept by reason and
        dropped, and the policy that decided."""
        kept = {reason: self.kept[reason] for reason in REASONS}
        return {
            "traces_decided": sum(kept.values()) + self.dropped,
            "traces_kept": sum(kept.values()),
            "traces_kept_by_reason": kept,
            "traces_dropped": self.dropped,
            "share": self.policy.share,
            "slow_percentile": self.policy.slow_percentile,
            "reward_band": list(self.policy.reward_band) if self.policy.reward_band else None,
        }


def _trace_id_bytes(trace_id: str) -> bytes | None:
    with contextlib.suppress(ValueError):
        raw = bytes.fromhex(trace_id)
        if len(raw) == 16:
            return raw
    return None


class _Active:
    """The run's tail sampler, where the driver's dispatcher finds it (None: not sampling)."""

    __slots__ = ("sampler",)

    def __init__(self) -> None:
        self.sampler: TailSampler | None = None


#: The one tail sampler of this process; set by the job for its run, cleared after it.
active: Final = _Active()
