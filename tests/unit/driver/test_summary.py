"""pass@k math and accounting."""

from __future__ import annotations

from math import comb

import pytest

from rollgym.driver.summary import (
    EVERY_K_UP_TO,
    Aggregator,
    Summary,
    merge_replicas,
    pass_at_k,
    reported_ks,
)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(5, 0, 1), (5, 1, 1), (5, 2, 3), (8, 3, 8), (10, 9, 2), (4, 4, 4)]
)
def test_pass_at_k_matches_the_combinatorial_definition(n: int, c: int, k: int) -> None:
    expected = 1 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_needs_k_samples() -> None:
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_aggregator_per_name_and_tasks_with_too_few_samples_excluded() -> None:
    agg = Aggregator(repeats=2, pass_threshold=1.0)
    agg.add_result("a", 0, 1.0)
    agg.add_result("a", 0, 0.0)
    agg.add_result("a", 1, 1.0)  # task 1 has one sample: only in pass@1
    agg.add_failure("a", "timeout")
    agg.add_failure(None, "invalid_row")
    stats = agg.by_dispatch_name()["a"]
    assert stats["completed"] == 3 and stats["failed"] == 1
    assert stats["mean_reward"] == pytest.approx(2 / 3)
    assert stats["pass_at_k"]["1"] == pytest.approx((0.5 + 1.0) / 2)
    assert stats["pass_at_k"]["2"] == pytest.approx(1.0)
    assert agg.requested == agg.completed + agg.failed == 5
    assert dict(agg.failed_by_kind) == {"timeout": 1, "invalid_row": 1}


def test_failures_are_not_zero_rewards() -> None:
    agg = Aggregator(repeats=1, pass_threshold=0.5)
    agg.add_result("a", 0, 1.0)
    agg.add_failure("a", "http_5xx")
    assert agg.by_dispatch_name()["a"]["mean_reward"] == 1.0


def test_replicas_add_up_to_their_server() -> None:
    per_replica = {
        "env": {
            "count": 3,
            "mean_reward": 1.0,
            "pass_rate": 1.0,
            "seeded": 4,
            "tool_calls": {"add": 5, "mul": 1},
            "sandbox": {"created": 2, "image": "py:3.11"},
            "flag": True,
        },
        "env@1": {
            "count": 1,
            "mean_reward": 0.0,
            "pass_rate": 0.0,
            "seeded": 1,
            "tool_calls": {"add": 2},
            "sandbox": {"created": 1, "image": "py:3.12"},
            "flag": True,
        },
        "env@2": {"error": "HTTP 503: down"},
    }
    merged = merge_replicas(per_replica)
    assert merged["count"] == 4
    assert merged["seeded"] == 5
    assert merged["mean_reward"] == pytest.approx(0.75)  # 3 x 1.0 and 1 x 0.0 over 4
    assert merged["pass_rate"] == pytest.approx(0.75)
    assert merged["tool_calls"] == {"add": 7, "mul": 1}
    # values that differ and cannot be added are left to the replicas' own entries
    assert merged["sandbox"] == {"created": 3}
    assert merged["flag"] is True
    assert merged["replicas"] == per_replica  # each replica still listed, its error too


def test_a_server_whose_replicas_all_failed_says_so() -> None:
    merged = merge_replicas({"env": {"error": "x"}, "env@1": {"error": "y"}})
    assert merged == {
        "error": "no replica answered",
        "replicas": {"env": {"error": "x"}, "env@1": {"error": "y"}},
    }


def test_usage_is_summed_per_dispatch_name_live_and_on_resume() -> None:
    agg = Aggregator(repeats=1, pass_threshold=1.0)
    agg.add_result("a", 0, 1.0, {"input_tokens": 10, "output_tokens": 2, "model_s": 0.5})
    agg.add_result("a", 1, 0.0, {"input_tokens": 5, "output_tokens": 1, "cached_tokens": 4})
    agg.add_result("b", 0, 1.0)  # an agent that called no model: no usage
    # A resumed session reads the earlier rows back through the ledger's callback.
    usage = {"input_tokens": 1, "output_tokens": 1, "model_s": 0.25, "bogus": True}
    agg.add_record({"dispatch_name": "a", "task_index": 2, "reward": 1.0, "usage": usage}, True)
    table = agg.by_dispatch_name()
    assert table["a"]["usage"] == {
        "cached_tokens": 4,
        "input_tokens": 16,
        "model_s": 0.75,
        "output_tokens": 4,
    }
    assert "usage" not in table["b"]


def test_summary_json_keeps_its_keys_in_order_and_says_an_empty_section_by_leaving_it_out() -> None:
    summary = Summary("r", "ok", 1, 1, 0, {}, {}, output_dir="runs/r")
    always = [
        "run_id",
        "status",
        "requested",
        "completed",
        "failed",
        "failed_by_kind",
        "by_dispatch_name",
        "environments",
        "telemetry",
        "duration_s",
        "rollouts_per_s",
        "servers",
        "warnings",
    ]
    assert list(summary.to_json()) == always  # never output_dir: the file sits in it
    summary.groups = {"count": 1}
    summary.staleness = {"max_lag": 0}
    summary.incomplete_model_calls = {"cut": 1}
    summary.probes = {"1": 0.0}
    written = summary.to_json()
    assert list(written) == [*always, "staleness", "probes", "incomplete_model_calls", "groups"]
    assert written["probes"] == {"1": 0.0} and written["groups"] == {"count": 1}


def test_pass_at_k_is_reported_at_every_k_then_at_doubling_k() -> None:
    assert reported_ks(1) == [1]
    assert reported_ks(EVERY_K_UP_TO) == list(range(1, EVERY_K_UP_TO + 1))
    assert reported_ks(64) == [1, 2, 4, 8, 16, 32, 64]
    assert reported_ks(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert reported_ks(2**30 + 1)[-2:] == [2**30, 2**30 + 1]


def test_a_summary_of_a_billion_repeats_is_made_at_once() -> None:
    """Every k of ``run.repeats=1000000000`` was a billion passes over the tasks: the run
    never wrote its summary, not even after Ctrl-C."""
    agg = Aggregator(repeats=10**9, pass_threshold=1.0)
    for task in range(50):
        agg.add_result("a", task, 1.0)
    stats = agg.by_dispatch_name()["a"]
    assert list(stats["pass_at_k"]) == [str(k) for k in reported_ks(10**9)]
    assert stats["pass_at_k"]["1"] == 1.0 and stats["pass_at_k"]["2"] is None
