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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollgym.driver.dispatch import AttemptOutcome, outcome_label
from rollgym.driver.outcomes import Outcome, RolloutFailure, RolloutResult
from rollgym.driver.rows import Rollout
from rollgym.errors import InvariantBroken
from rollgym.telemetry.names import OUTCOME_ERROR
from rollgym.trajectory.record import TRAJECTORY_KEY
from rollgym.trajectory.usage import take_usage

if TYPE_CHECKING:
    from rollgym.telemetry.metrics import RolloutMetrics

SendAttempt = Callable[[Rollout, int], Awaitable[AttemptOutcome]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a rollout gets and how long to wait between them."""

    max_attempts: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based): full jitter."""
        ceiling = min(self.backoff_max_s, self.backoff_s * (2**attempt))
        return random.uniform(0.0, ceiling) if ceiling > 0 else 0.0


class InFlight:
    """Rollouts in flight, oldest first (insertion order), for progress and hung-tail display."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        #: (task_index, rollout_index) -> [Rollout, dispatch_name, attempt, started monotonic]
        self.entries: dict[tuple[int, int], list[Any]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def oldest(self, count: int) -> list[dict[str, object]]:
        now = time.monotonic()
        rows = []
        for rollout, name, attempt, started in self.entries.values():
            rollout_id = rollout.rollout_id(attempt)
            rows.append(
                {
                    "rollout_id": rollout_id,
                    "dispatch_name": name,
                    "attempt": attempt,
                    "elapsed_s": round(now - started, 3),
                }
            )
            if len(rows) == count:
                break
        return rows


def result_of(rollout: Rollout, outcome: AttemptOutcome, name: str) -> Outcome:
    """Turn the final attempt into the rollout's record; ``name`` is its dispatch name."""
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
        )
    error = outcome.error
    message = str(error)
    if outcome.attempt > 0:
        message += f" (after {outcome.attempt + 1} attempts)"
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
) -> Outcome:
    """All attempts of one rollout; returns its record.

    When cancelled, hands the ``cancelled`` record to ``on_cancel`` and lets the cancellation
    propagate, so an interrupted rollout is still accounted for.
    """
    task = rollout.task
    name = rollout.target.dispatch_name
    key = (task.task_index, rollout.rollout_index)
    entry: list[object] = [rollout, name, 0, time.monotonic()]
    in_flight.entries[key] = entry
    if metrics is not None:
        metrics.started(name)
    t0 = time.perf_counter()
    attempt = 0
    try:
        while True:
            entry[2] = attempt
            outcome = await send(rollout, attempt)
            error = outcome.error
            if error is None or not error.transient or attempt + 1 >= policy.max_attempts:
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
        metrics.finished(name, outcome_label(error), outcome.reward, time.perf_counter() - t0)
    return result_of(rollout, outcome, name)
