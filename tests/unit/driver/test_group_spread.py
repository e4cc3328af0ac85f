"""GroupSpread: per-task reward spread and the zero-variance share, as summary.json has them."""

from __future__ import annotations

import statistics

import pytest

from rollgym.driver.group_spread import GroupSpread
from rollgym.driver.summary import Aggregator, Summary


def test_each_group_spread_and_the_zero_variance_share() -> None:
    spread = GroupSpread(4)
    groups = {0: [1.0, 0.0, 1.0, 0.0], 1: [1.0, 1.0, 1.0, 1.0], 3: [0.5], 5: [0.2, 0.7, 0.7]}
    for task, rewards in groups.items():
        for reward in rewards:
            spread.add(task, reward)
    rows = {row["task_index"]: row for row in spread.rows()}
    assert set(rows) == set(groups)  # tasks 2 and 4 have no reward: no group
    for task, rewards in groups.items():
        row = rows[task]
        assert (row["n"], row["min"], row["max"]) == (len(rewards), min(rewards), max(rewards))
        assert row["std"] == pytest.approx(statistics.pstdev(rewards))
    assert [t for t, r in rows.items() if r["zero_variance"]] == [1, 3]  # equal, or one reward
    summary = spread.summary()
    assert summary["groups"] == 4 and summary["zero_variance"] == 2
    assert summary["zero_variance_share"] == 0.5
    assert summary["short_groups"] == 2


def test_summary_json_has_groups_only_with_repeats() -> None:
    for repeats, expected in ((1, False), (2, True)):
        aggregator = Aggregator(repeats, 1.0)
        aggregator.add_result("a", 0, 1.0)
        aggregator.add_record(
            {"dispatch_name": "a", "task_index": 0, "reward": 1.0}, is_result=True
        )  # a resumed record counts in its group too
        data = Summary.from_aggregator("r", "completed", aggregator, 1.0, 1).to_json()
        assert ("groups" in data) is expected
        if expected:
            assert data["groups"]["zero_variance"] == 1 and data["groups"]["groups"] == 1
