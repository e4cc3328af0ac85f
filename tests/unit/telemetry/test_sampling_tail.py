"""The tail sampler's decision: every failure kept, then slow, reward band and share, each
attempt counted once by the reason that kept it."""

from __future__ import annotations

import random

import pytest

from rollgym.telemetry.sampling_tail import (
    REASONS,
    AttemptEnd,
    RunningPercentile,
    TailPolicy,
    TailSampler,
)


def _ids(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def test_every_failure_timeout_and_stale_attempt_is_kept_even_with_no_share():
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None))
    ids = _ids(30)
    for i, trace_id in enumerate(ids):
        end = AttemptEnd(
            trace_id, timed_out=i % 3 == 0, failed=i % 3 == 1, stale=i % 3 == 2, reward=1.0
        )
        assert sampler.decide(end) is True
    assert sampler.kept == {"timeout": 10, "failed": 10, "stale": 10}
    assert sampler.dropped == 0
    # an ordinary attempt with no share left is dropped, its id remembered for the store
    assert sampler.decide(AttemptEnd(ids[0], reward=1.0)) is False
    assert sampler.dropped_traces == [bytes.fromhex(ids[0])]


def test_the_share_keeps_about_its_share_and_the_same_id_always_alike():
    sampler = TailSampler(TailPolicy(share=0.1, slow_percentile=None))
    ids = _ids(20_000)
    kept = sum(sampler.decide(AttemptEnd(t, reward=0.5)) for t in ids)
    assert 0.09 < kept / len(ids) < 0.11
    again = TailSampler(TailPolicy(share=0.1, slow_percentile=None))
    assert [again.reason(AttemptEnd(t)) for t in ids[:500]] == [
        sampler.reason(AttemptEnd(t)) for t in ids[:500]
    ]
    counts = sampler.counts()
    assert counts["traces_decided"] == len(ids)
    assert counts["traces_kept"] == kept == counts["traces_kept_by_reason"]["share"]  # type: ignore[index]
    assert counts["traces_dropped"] == len(ids) - kept
    assert list(counts["traces_kept_by_reason"]) == list(REASONS)  # type: ignore[arg-type]


def test_the_slowest_by_the_running_percentile_are_kept():
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=90.0, min_samples=20))
    rng = random.Random(3)
    durations = [rng.lognormvariate(0.0, 0.5) for _ in range(2000)]
    kept = [
        sampler.decide(AttemptEnd(t, duration_s=d))
        for t, d in zip(_ids(2000), durations, strict=True)
    ]
    assert not any(kept[:20])  # judged from the 20th duration on
    for i in range(20, 2000):  # the 90th percentile of the (up to 1,000) durations before
        before = sorted(durations[max(0, i - 1000) : i])
        assert kept[i] == (durations[i] >= before[int(0.9 * len(before))]), i
    assert 0.07 < sum(kept) / 2000 < 0.13
    assert sampler.kept["slow"] == sum(kept)


def test_rewards_outside_the_band_are_kept_and_inside_it_not():
    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None, reward_band=(0.0, 1.0)))
    ids = _ids(5)
    assert [
        sampler.decide(AttemptEnd(t, reward=r))
        for t, r in zip(ids, [-0.5, 0.0, 0.7, 1.0, 3.0], strict=True)
    ] == [True, False, False, False, True]
    assert sampler.kept["reward"] == 2


def test_the_reasons_are_tried_in_order_and_counted_once():
    sampler = TailSampler(TailPolicy(share=1.0, slow_percentile=None, reward_band=(0, 1)))
    (trace_id,) = _ids(1)
    assert sampler.reason(AttemptEnd(trace_id, timed_out=True, failed=True)) == "timeout"
    assert sampler.reason(AttemptEnd(trace_id, failed=True, stale=True)) == "failed"
    assert sampler.reason(AttemptEnd(trace_id, stale=True, reward=9.0)) == "stale"
    assert sampler.reason(AttemptEnd(trace_id, reward=9.0)) == "reward"
    assert sampler.reason(AttemptEnd(trace_id, reward=0.5)) == "share"


def test_a_share_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="share"):
        TailSampler(TailPolicy(share=1.5))


def test_the_running_percentile_forgets_beyond_its_window():
    running = RunningPercentile(50.0, window=4)
    assert running.value() is None
    for value in (10.0, 20.0, 30.0, 40.0):
        running.add(value)
    assert running.value() == 30.0
    for value in (1.0, 2.0, 3.0, 4.0):  # the first four leave the window
        running.add(value)
    assert len(running) == 4 and running.value() == 3.0


def test_queued_decisions_are_handed_out_once_in_order_when_their_time_has_come():
    import time

    from rollgym.telemetry.sampling_tail import grace_after

    sampler = TailSampler(TailPolicy(share=0.0, slow_percentile=None), queue_decisions=True)
    ids = _ids(3)
    sampler.decide(AttemptEnd(ids[0], failed=True))
    sampler.decide(AttemptEnd(ids[1]))
    sampler.decide(AttemptEnd("not-a-trace-id"))  # kept (no id to decide on), never queued
    assert sampler.due(time.monotonic() - 60) == []  # none decided that long ago
    assert sampler.due(time.monotonic()) == [
        (bytes.fromhex(ids[0]), True),
        (bytes.fromhex(ids[1]), False),
    ]
    assert sampler.due(time.monotonic()) == []  # each once
    assert sampler.dropped == 1 and sum(sampler.kept.values()) == 2
    assert TailSampler(TailPolicy()).due(float("inf")) == []  # not queued: nothing kept for it
    assert grace_after(500) == 2.0
