"""An engine's request id back to the rollout it names (how ``traces check`` attributes it)."""

from __future__ import annotations

import pytest

from rollgym.reading.engine_ids import rollout_of_engine_id, strip_engine_decorations


@pytest.mark.parametrize(
    ("engine_id", "rollout"),
    [
        ("chatcmpl-3-0.2", "3-0"),  # vLLM chat: chatcmpl-<X-Request-Id>
        ("cmpl-3-0-a1.0", "3-0-a1"),  # completions, an attempt after the first
        ("cmpl-3-0.4-1", "3-0"),  # completions, one prompt of a batch
        ("resp_custom.v1.3", "custom.v1"),  # responses; a rollout id with a dot in it
        ("resp_3-0.2_0", "3-0"),  # responses by the body's request_id: vLLM's sub-request
        ("resp_3-0_1.2_1", "3-0_1"),  # ... of a rollout id with an underscore in it
        ("0_chatcmpl-3-0.2", "3-0"),  # a sub-request of parallel sampling
        ("chatcmpl-3-0.2-1a2b3c4d", "3-0"),  # a random suffix on the internal id
        ("3-0.7", "3-0"),  # the id as sent, undecorated
        ("chatcmpl-t%C3%A2che-1.0", "tâche-1"),  # a non-ASCII id travels percent-encoded
        ("chatcmpl-walk-%F0%9F%9A%80-r1.2-1a2b3c4d", "walk-🚀-r1"),
        ("chatcmpl-9d0c6a3e2b7f41c8", None),  # vLLM's own random id: names no rollout
        ("chatcmpl-", None),
        ("", None),
    ],
)
def test_vllm_id_forms(engine_id: str, rollout: str | None) -> None:
    assert rollout_of_engine_id(engine_id) == rollout


def test_an_id_sent_as_a_uuid_maps_back_through_the_model_span() -> None:
    sent = "5b1f9c1e-2a3d-5e6f-8a9b-0c1d2e3f4a5b"
    mapping = {sent: "7-1"}
    assert rollout_of_engine_id(f"chatcmpl-{sent}", mapping) == "7-1"
    assert rollout_of_engine_id(f"chatcmpl-{sent}-1a2b3c4d", mapping) == "7-1"
    assert rollout_of_engine_id(f"chatcmpl-{sent}") is None
    assert rollout_of_engine_id(f"resp_{sent}_0", mapping) == "7-1"  # a Responses call


def test_strip_keeps_what_was_sent() -> None:
    assert strip_engine_decorations("1_cmpl-3-0.2") == "3-0.2"
    assert strip_engine_decorations("x-3-0.2") == "x-3-0.2"
