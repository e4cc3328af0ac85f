"""Backoff: exponential, capped, fully jittered."""

from __future__ import annotations

from rollgym.driver.retry import RetryPolicy


def test_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(max_attempts=10, backoff_s=0.5, backoff_max_s=3.0)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (8, 3.0)]:
        delays = [policy.delay(attempt) for _ in range(300)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # full jitter spans the range
        assert min(delays) < ceiling * 0.2


def test_zero_backoff_means_no_wait() -> None:
    assert RetryPolicy(backoff_s=0.0).delay(3) == 0.0
