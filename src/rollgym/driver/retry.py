"""Attempts of one rollout: retry transient failures with capped, jittered backoff.

Each retry is a new attempt with its own rollout id (``3-0`` -> ``3-0-a1`` -> ``3-0-a2``), so
every attempt is its own trace and its own server-side rollout. Permanent failures (4xx, an
answer without a reward) are never retried: another attempt would fail the same way. Backoff is
exponential from ``retry_backoff_s``, capped at ``retry_backoff_max_s``, with full jitter so a
burst of failures does not come back as a synchronized burst of retries.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollgym.driver.dispatch import AttemptOutcome, outcome_label
from rollgym.driver.outcomes import Outcome, RolloutFailure, RolloutResult
from rollgym.driver.policy_clock import PolicyClock
from rollgym.driver.rows import Rollout
from rollgym.errors import InvariantBroken, PermanentDispatchError
from rollgym.policy_versions import version_list
from rollgym.telemetry.names import OUTCOME_ERROR
from rollgym.trajectory.record import TRAJECTORY_KEY
from rollgym.trajectory.usage import USAGE_KEY, take_usage

if TYPE_CHECKING:
    from rollgym.telemetry.metrics import RolloutMetrics

SendAttempt = Callable[[Rollout, int], Awaitable[AttemptOutcome]]
#: Stands for "stale" where the metrics want an attempt's error (it never leaves this module).
_STALE = PermanentDispatchError("stale", kind="stale")
#: Stands for "incomplete_model_call" the same way.
_INCOMPLETE = PermanentDispatchError("incomplete_model_call", kind="incomplete_model_call")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a rollout gets and how long to wait between them."""

    max_attempts: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    #: A result with an incomplete model call is run again (``run.incomplete_model_calls``).
    retry_incomplete: bool = True

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based): full jitter."""
        ceiling = min(self.backoff_max_s, self.backoff_s * (2**attempt))
        return random.uniform(0.0, ceiling) if ceiling > 0 else 0.0


@dataclass(slots=True)
class Flying:
    """One rollout in flight: which, where to, its current attempt, since when (monotonic)."""

    rollout: Rollout
    dispatch_name: str
    attempt: int
    started: float


class InFlight:
    """Rollouts in flight, oldest first (insertion order), for progress and hung-tail display."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        #: (task_index, rollout_index) -> the rollout in flight under that key
        self.entries: dict[tuple[int, int], Flying] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def oldest(self, count: int) -> list[dict[str, object]]:
        now = time.monotonic()
        rows = []
        for flying in self.entries.values():
            rows.append(
                {
                    "rollout_id": flying.rollout.rollout_id(flying.attempt),
                    "dispatch_name": flying.dispatch_name,
                    "attempt": flying.attempt,
                    "elapsed_s": round(now - flying.started, 3),
                }
            )
            if len(rows) == count:
                break
        return rows


def result_of(
    rollout: Rollout, outcome: AttemptOutcome, name: str, clock: PolicyClock | None = None
) -> Outcome:
    """Turn the final attempt into the rollout's record; ``name`` is its dispatch name.

    With a ``clock``, a result's ``policy_lag`` is measured against the current version."""
    task = rollout.task
    if outcome.error is None:
        if outcome.reward is None or outcome.result is None:
            raise InvariantBroken(
                f"attempt {outcome.attempt} of {outcome.rollout_id} has neither an error nor a "
                "reward and result"
            )
        trajectory = outcome.result.get(TRAJECTORY_KEY)
        if isinstance(trajectory, dict):  # stored once, in trajectories.jsonl
            del outcome.result[TRAJECTORY_KEY]
        else:
            trajectory = None  # not a trajectory: left in the result as the agent sent it
        usage = take_usage(outcome.result)  # stored beside the result, not inside it
        versions = version_list(usage.pop("policy_versions", None)) if usage else None
        engine = version_list(usage.pop("engine_versions", None)) if usage else None
        lag = clock.lag(versions) if clock is not None and versions else None
        return RolloutResult(
            outcome.rollout_id,
            task.task_index,
            rollout.rollout_index,
            outcome.attempt,
            name,
            outcome.reward,
            outcome.duration_s,
            outcome.trace_id,
            outcome.started_at,
            outcome.started_at + outcome.duration_s,
            outcome.result,
            outcome.trace_sampled,
            trajectory,
            usage,
            versions,
            engine,
            lag,
        )
    error = outcome.error
    message = str(error)
    if outcome.attempt > 0:
        message += f" (after {outcome.attempt + 1} attempts)"
    detail = error.detail or {}
    frames, partial = detail.get("frames"), detail.get("trajectory")
    return RolloutFailure(
        outcome.rollout_id,
        task.task_index,
        rollout.rollout_index,
        outcome.attempt,
        name,
        error.kind,
        message,
        task.line,
        outcome.trace_id,
        outcome.trace_sampled,
        frames=frames if isinstance(frames, list) else None,
        partial_trajectory=partial if isinstance(partial, dict) else None,
    )


def stale_failure(
    result: RolloutResult, clock: PolicyClock, task_line: int | None
) -> RolloutFailure:
    """The record of a rollout whose every attempt came back too stale to hand over."""
    attempts = result.attempt + 1
    return RolloutFailure(
        result.rollout_id,
        result.task_index,
        result.rollout_index,
        result.attempt,
        result.dispatch_name,
        "stale",
        f"ran on policy versions {result.policy_versions}, {result.policy_lag} behind the "
        f"current {clock.current!r} (max_staleness {clock.max_staleness}) "
        f"after {attempts} attempt{'s' if attempts > 1 else ''}",
        task_line,
        result.trace_id,
        result.trace_sampled,
    )


def incomplete_calls(result: Mapping[str, object] | None) -> int:
    """How many of an answer's model calls were not whole (its usage says; 0 without one)."""
    usage = result.get(USAGE_KEY) if result is not None else None
    calls = usage.get("incomplete_calls") if isinstance(usage, Mapping) else None
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else 0


def incomplete_failure(
    rollout: Rollout, outcome: AttemptOutcome, name: str, calls: int
) -> RolloutFailure:
    """The record of a rollout whose every attempt had a model answer that was not whole."""
    attempts = outcome.attempt + 1
    return RolloutFailure(
        outcome.rollout_id,
        rollout.task.task_index,
        rollout.rollout_index,
        outcome.attempt,
        name,
        "incomplete_model_call",
        f"{calls} model call{'s' if calls > 1 else ''} answered incompletely (a stream cut "
        f"short, or no finish reason) after {attempts} attempt{'s' if attempts > 1 else ''}; "
        "run.incomplete_model_calls: accept keeps such results",
        rollout.task.line,
        outcome.trace_id,
        outcome.trace_sampled,
    )


def cancelled_failure(rollout: Rollout, attempt: int) -> RolloutFailure:
    """The record of a rollout stopped by Ctrl-C / SIGTERM; a resume runs it again."""
    task = rollout.task
    return RolloutFailure(
        rollout.rollout_id(attempt),
        task.task_index,
        rollout.rollout_index,
        attempt,
        task.target.dispatch_name if task.target is not None else None,
        "cancelled",
        f"cancelled at attempt {attempt} (the run was interrupted; a resume runs it again)",
        task.line,
    )


async def run_rollout(
    rollout: Rollout,
    send: SendAttempt,
    policy: RetryPolicy,
    in_flight: InFlight,
    on_cancel: Callable[[RolloutFailure], object],
    metrics: RolloutMetrics | None = None,
    clock: PolicyClock | None = None,
) -> Outcome:
    """All attempts of one rollout; returns its record.

    When cancelled, hands the ``cancelled`` record to ``on_cancel`` and lets the cancellation
    propagate, so an interrupted rollout is still accounted for. With a ``clock`` whose
    ``max_staleness`` is set, a result too stale to hand over is run again at once (a new
    attempt, while attempts remain), else it becomes a ``stale`` failure.
    """
    task = rollout.task
    name = rollout.target.dispatch_name
    key = (task.task_index, rollout.rollout_index)
    entry = Flying(rollout, name, 0, time.monotonic())
    in_flight.entries[key] = entry
    if metrics is not None:
        metrics.started(name)
    t0 = time.perf_counter()
    attempt = 0
    record: Outcome | None = None
    try:
        while True:
            entry.attempt = attempt
            record = None
            outcome = await send(rollout, attempt)
            error = outcome.error
            last = attempt + 1 >= policy.max_attempts
            calls = incomplete_calls(outcome.result) if policy.retry_incomplete else 0
            if error is None and calls:
                if last:
                    record = incomplete_failure(rollout, outcome, name, calls)
                    error = _INCOMPLETE
                    break
                await asyncio.sleep(policy.delay(attempt))
                attempt += 1
                continue
            if error is None and clock is not None:
                record = result_of(rollout, outcome, name, clock)
                if not (isinstance(record, RolloutResult) and clock.too_stale(record.policy_lag)):
                    break
                if last:
                    record = stale_failure(record, clock, task.line)
                    error = _STALE
                    break
                attempt += 1  # no backoff: nothing failed, the weights moved on
                continue
            if error is None or not error.transient or last:
                break
            await asyncio.sleep(policy.delay(attempt))
            attempt += 1
    except asyncio.CancelledError:
        on_cancel(cancelled_failure(rollout, attempt))
        if metrics is not None:
            metrics.finished(name, OUTCOME_ERROR, None, time.perf_counter() - t0)
        raise
    finally:
        del in_flight.entries[key]
    if metrics is not None:
        reward = None if isinstance(record, RolloutFailure) else outcome.reward  # stale: none
        metrics.finished(name, outcome_label(error), reward, time.perf_counter() - t0)
    return record if record is not None else result_of(rollout, outcome, name)
