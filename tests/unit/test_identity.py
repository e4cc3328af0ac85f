"""Rollout identity: one derivation for the driver, the servers and telemetry."""

from __future__ import annotations

import pytest

from rollgym.identity import episode_body, make_rollout_id, rollout_id_of, rollout_id_of_episode


@pytest.mark.parametrize(
    ("explicit", "task", "rollout", "attempt", "expected"),
    [
        (None, 3, 0, 0, "3-0"),
        (None, 3, 0, 2, "3-0-a2"),
        (None, 0, 7, 1, "0-7-a1"),
        ("custom", 3, 0, 0, "custom"),
        ("custom", 3, 0, 2, "custom-a2"),
        ("custom", 3, 1, 0, "custom-r1"),
        ("custom", 3, 1, 2, "custom-r1-a2"),
    ],
)
def test_make_rollout_id(
    explicit: str | None, task: int, rollout: int, attempt: int, expected: str
) -> None:
    assert make_rollout_id(explicit, task, rollout, attempt) == expected


def test_rollout_id_of_collector_rows() -> None:
    assert rollout_id_of({"task_index": 3, "rollout_index": 0, "attempt": 2}) == "3-0-a2"
    assert (
        rollout_id_of({"rollout_id": "custom", "task_index": 9, "rollout_index": 0, "attempt": 2})
        == "custom-a2"
    )
    assert rollout_id_of({"task_index": 3}) == "3-0"


@pytest.mark.parametrize(
    "row",
    [
        {"task_index": 3, "rollout_index": 0, "attempt": [1]},
        {"task_index": "3", "rollout_index": 0, "attempt": 0},
        {"task_index": 3, "rollout_index": 1.5, "attempt": 0},
        {"task_index": 3, "rollout_index": 0, "attempt": True},
        {"task_index": -1, "rollout_index": 0, "attempt": 0},
        {"rollout_id": 5, "task_index": 3},
        {"rollout_id": "", "task_index": 3},
        {},
    ],
)
def test_wrong_types_have_no_id(row: dict) -> None:
    assert rollout_id_of(row) is None


def test_foreign_mapping_that_raises_has_no_id() -> None:
    class Exploding(dict):
        def get(self, *args: object) -> object:
            raise RuntimeError("boom")

    assert rollout_id_of(Exploding()) is None


def test_episode_body_carries_identity_only_as_episode_id() -> None:
    body = episode_body("3-0-a1", 1, {"question": "1+1"})
    assert body == {
        "episode_id": {"rollout_id": "3-0-a1", "attempt": 1},
        "task": {"question": "1+1"},
    }
    assert rollout_id_of_episode(body) == "3-0-a1"
    assert rollout_id_of_episode({"episode_id": {"rollout_id": 3}}) is None
    assert rollout_id_of_episode({}) is None
