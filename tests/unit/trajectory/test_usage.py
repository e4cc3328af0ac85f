"""A rollout's usage tally: OpenAI usage fields in, engine-neutral sums out."""

from __future__ import annotations

from rollgym.trajectory.usage import USAGE_KEY, UsageTally, attach_usage, take_usage


def test_tally_sums_tokens_and_counts_cached_only_where_said() -> None:
    tally = UsageTally()
    tally.add({"usage": {"prompt_tokens": 10, "completion_tokens": 3}}, 0.25)
    assert "cached_tokens" not in tally.to_json()  # no engine said: absent, not 0
    tally.add(
        {
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 8},
            }
        },
        0.5,
    )
    tally.add({"usage": {"prompt_tokens": True, "completion_tokens": -1}})  # junk ignored
    tally.add({"choices": []})  # no usage at all: still a call
    assert tally.to_json() == {
        "input_tokens": 22,
        "output_tokens": 7,
        "cached_tokens": 8,
        "model_calls": 4,
        "model_s": 0.75,
        "incomplete_calls": 4,  # not one of them had a choice with a finish reason
    }


def test_attach_and_take_round_trip_and_leave_odd_answers_alone() -> None:
    tally = UsageTally()
    assert attach_usage({"reward": 1.0}, tally) == {"reward": 1.0}  # no call: nothing added
    tally.add({"usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    answer = attach_usage({"reward": 1.0, "x": 1}, tally)
    assert answer[USAGE_KEY]["output_tokens"] == 2
    assert attach_usage([1, 2], tally) == [1, 2]
    assert take_usage(answer) == tally.to_json() and answer == {"reward": 1.0, "x": 1}
    assert take_usage({"reward": 1.0, USAGE_KEY: "not a dict"}) is None
