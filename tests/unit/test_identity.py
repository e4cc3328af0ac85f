"""Rollout identity: one derivation for the driver, the servers and telemetry."""

from __future__ import annotations

import pytest

from rollgym.identity import (
    episode_body,
    header_text,
    id_problem,
    make_rollout_id,
    request_id_of,
    rollout_id_of,
    rollout_id_of_episode,
    rollout_of_request_id,
)


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


@pytest.mark.parametrize(
    ("rollout_id", "wire"),
    [
        ("3-0", "3-0"),
        ("custom.v1", "custom.v1"),
        ("tâche-1", "t%C3%A2che-1"),
        ("задача", "%D0%B7%D0%B0%D0%B4%D0%B0%D1%87%D0%B0"),
        ("walk-🚀", "walk-%F0%9F%9A%80"),
        ("50%-done", "50%25-done"),  # the escape's own sign is escaped, so decoding is exact
        ("a b", "a%20b"),
    ],
)
def test_a_request_id_is_ascii_and_reads_back_to_its_rollout(rollout_id: str, wire: str) -> None:
    request_id = request_id_of(rollout_id, 2)
    assert request_id == f"{wire}.2"
    assert request_id.isascii() and request_id.isprintable()
    assert rollout_of_request_id(request_id) == rollout_id


def test_a_header_sent_as_raw_utf8_reads_back_as_text() -> None:
    as_latin1 = "tâche-1.0".encode().decode("latin-1")  # what an ASGI server hands over
    assert header_text(as_latin1) == "tâche-1.0"
    assert header_text("3-0.1") == "3-0.1"
    assert header_text("caf\xe9") == "caf\xe9"  # not UTF-8: left as it is


@pytest.mark.parametrize(
    "bad",
    [
        "a\nb",
        "\x00",
        "x\x1b]0;title\x07",
        "del\x7f",
        "c1\x85",
        "lone\ud800",
        "l\u2028s",
        "\u202eevil",
    ],
)
def test_ids_a_terminal_or_header_cannot_carry_are_refused(bad: str) -> None:
    problem = id_problem(bad)
    assert problem is not None and problem.startswith("character U+")
    assert problem.isprintable()


@pytest.mark.parametrize("good", ["3-0", "tâche-1", "задача", "walk-🚀", "👨‍👩‍👧", "a b", "x%y"])
def test_printable_ids_are_allowed(good: str) -> None:
    assert id_problem(good) is None
