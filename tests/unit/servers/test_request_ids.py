"""Request ids of model calls: the turn counter's bound and the upstream UUID form."""

from __future__ import annotations

import uuid

from rollgym.servers.request_ids import (
    TurnCounter,
    is_uuid,
    request_id_of,
    rollout_of_request_id,
    upstream_uuid,
)


def test_turns_count_per_rollout_and_memory_is_bounded():
    counter = TurnCounter(capacity=2)
    assert [counter.next_request_id("a") for _ in range(3)] == ["a.0", "a.1", "a.2"]
    assert counter.next_request_id("b") == "b.0"
    assert counter.next_request_id("a") == "a.3"  # "a" is now the most recent
    assert counter.next_request_id("c") == "c.0"  # forgets "b", the least recent
    assert len(counter) == 2
    assert counter.next_request_id("b") == "b.0"


def test_upstream_uuid_is_deterministic_and_a_uuid():
    first = upstream_uuid("3-0.1")
    assert first == upstream_uuid("3-0.1") != upstream_uuid("3-0.2")
    assert is_uuid(first) and uuid.UUID(first).version == 5
    assert not is_uuid("3-0.1")
    assert rollout_of_request_id(request_id_of("custom.id", 4)) == "custom.id"
