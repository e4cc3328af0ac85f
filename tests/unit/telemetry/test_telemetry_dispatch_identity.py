"""Dispatch span identity comes from the collector row, never the posted body; never raises."""

from __future__ import annotations

from typing import Any

import pytest

from rollgym.identity import episode_body, rollout_id_of
from rollgym.telemetry import spans


@pytest.mark.parametrize(
    ("row", "expected_id", "expected_attempt"),
    [
        ({"task_index": 3, "rollout_index": 0, "attempt": 0}, "3-0", 0),
        ({"task_index": 3, "rollout_index": 0, "attempt": 2}, "3-0-a2", 2),
        (
            {"rollout_id": "custom", "task_index": 9, "rollout_index": 0, "attempt": 2},
            "custom-a2",
            2,
        ),
        # an episode-routed (materialized task set) row: identity still from the row
        (
            {
                "task_id": {"taskset": "t", "task_id": "x"},
                "task_index": 3,
                "rollout_index": 0,
                "attempt": 2,
            },
            "3-0-a2",
            2,
        ),
    ],
)
def test_identity_from_collector_row(named, row, expected_id, expected_attempt):
    body = episode_body(rollout_id_of(row), row["attempt"], {"q": 1})
    assert "task_index" not in body  # the body carries identity only as episode_id
    with spans.dispatch_span(row, "env_server", "env_server"):
        pass
    (d,) = named("gym.rollout.dispatch")
    assert d.attributes["gym.rollout.id"] == expected_id
    assert d.attributes["gym.rollout.attempt"] == expected_attempt
    assert d.attributes["gym.rollout.dispatch.name"] == "env_server"
    assert d.attributes["gym.http.destination.server.name"] == "env_server"


@pytest.mark.parametrize(
    "row",
    [
        {"task_index": 3, "rollout_index": 0, "attempt": [1]},  # attempt is a list
        {"task_index": "3", "rollout_index": 0, "attempt": 0},  # index is a string
        {"task_index": 3, "rollout_index": "0", "attempt": 0},
        {},
    ],
)
def test_underivable_identity_omits_attribute_and_does_not_raise(named, row):
    ran = False
    with spans.dispatch_span(row, "agent", "agent_srv"):
        ran = True
    assert ran
    (d,) = named("gym.rollout.dispatch")
    assert "gym.rollout.id" not in d.attributes
    if not isinstance(row.get("attempt"), int):
        assert "gym.rollout.attempt" not in d.attributes
    assert d.attributes["gym.rollout.dispatch.name"] == "agent"
    assert d.attributes["gym.http.destination.server.name"] == "agent_srv"


class _Hostile(dict):
    def get(self, *_: Any) -> Any:
        raise RuntimeError("a foreign mapping that raises")


def test_a_mapping_that_raises_does_not_reach_the_dispatch(named):
    with spans.dispatch_span(_Hostile(), "agent", "agent"):
        pass
    (d,) = named("gym.rollout.dispatch")
    assert "gym.rollout.id" not in d.attributes


def test_outcome_and_reward(named):
    with spans.dispatch_span({"task_index": 0}, "a", "a") as span:
        spans.record_dispatch_outcome(span, "ok", 0.75)
    with spans.dispatch_span({"task_index": 1}, "a", "a") as span:
        spans.record_dispatch_outcome(span, "timeout", None)
    ok, failed = named("gym.rollout.dispatch")
    assert ok.attributes["gym.rollout.outcome"] == "ok"
    assert ok.attributes["gym.rollout.reward"] == 0.75
    assert ok.status.status_code.name == "UNSET"
    assert failed.attributes["gym.rollout.outcome"] == "timeout"
    assert "gym.rollout.reward" not in failed.attributes
    assert failed.status.status_code.name == "ERROR"


def test_inline_derivation_answers_as_rollout_id_of_for_every_row():
    """The dispatch span's inline path for the driver's rows gives exactly what the general
    derivation gives, for rows it answers itself and rows it hands on."""
    import enum
    import itertools

    from rollgym.telemetry.spans import _row_rollout_id

    class Small(enum.IntEnum):
        ONE = 1

    values: list[object] = [0, 2, -1, True, Small.ONE, "3", None, 1.0, [1]]
    explicit: list[object] = [None, "custom", "", 5, ["x"]]
    missing = object()
    checked = 0
    for attempt, index, task, rid in itertools.product(
        [*values, missing], [*values, missing], [*values, missing], [*explicit, missing]
    ):
        row = {
            key: value
            for key, value in (
                ("attempt", attempt),
                ("rollout_index", index),
                ("task_index", task),
                ("rollout_id", rid),
            )
            if value is not missing
        }
        assert _row_rollout_id(row) == rollout_id_of(row), row
        checked += 1
    assert checked == 10 * 10 * 10 * 6
    assert _row_rollout_id({"task_index": 3, "rollout_index": 1, "attempt": 2}) == "3-1-a2"
