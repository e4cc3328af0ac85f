"""A model server's policy version: set by the driver, stamped per request at arrival."""

from __future__ import annotations

import asyncio
from typing import Any

import rollgym.policy_versions as policy_versions
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.trajectory.tokens import token_sequence
from waits import until

FAST = {"latency": {"kind": "fixed", "seconds": 0.0}}
ASK = {"messages": [{"role": "user", "content": "Compute: 1 + 2\nReply with 'Answer: <n>'."}]}


async def test_version_is_set_read_refused_and_stamped(serving, client) -> None:
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        plain = await client.post_json("policy", url + "/v1/chat/completions", ASK)
        assert "policy_version" not in plain.data  # nothing set: nothing stamped
        bad = await client.post_json("policy", url + "/policy_version", {"version": True})
        assert bad.status == 400 and bad.data["field"] == "version"
        ok = await client.post_json("policy", url + "/policy_version", {"version": "step-3"})
        assert ok.status == 200
        assert (await client.get_json("policy", url + "/policy_version")).data == {
            "version": "step-3"
        }
        answer = await client.post_json("policy", url + "/v1/chat/completions", ASK)
        assert answer.data["policy_version"] == "step-3"
        assert answer.data["engine_policy_version"] == "step-3"
        streamed = await client.post_json(
            "policy", url + "/v1/chat/completions", {**ASK, "stream": True}
        )
        assert streamed.status == 200


async def test_simulated_trainer_bumps_on_arrival(serving, client) -> None:
    model = SimulatedModel.build("policy", {**FAST, "bump_every": 2, "bump_at": [1]})
    async with serving(model) as url:
        versions = []
        for _ in range(5):
            answer = await client.post_json("policy", url + "/v1/chat/completions", ASK)
            versions.append(answer.data["policy_version"])
    assert versions == [0, 1, 2, 2, 3]  # bump_at 1, then every 2nd request (2, 4)


async def test_a_change_during_a_generation_is_placed_at_a_token(serving, client) -> None:
    slow = {"latency": {"kind": "fixed", "seconds": 0.6}, "prefill_share": 0.0}
    model = SimulatedModel.build("policy", slow)
    async with serving(model) as url:
        await client.post_json("policy", url + "/policy_version", {"version": 1})
        call = asyncio.ensure_future(client.post_json("policy", url + "/v1/chat/completions", ASK))
        # the call has read its version and is generating (0.6 s): however slow the machine
        await until(lambda: model._gate.calls == 1, "the call to be generating")
        await client.post_json("policy", url + "/policy_version", {"version": 2})
        answer = (await call).data
    assert answer["policy_version"] == 1 and answer["policy_version_end"] == 2
    spans = answer["policy_version_tokens"]
    tokens = answer["usage"]["completion_tokens"]
    assert [s["version"] for s in spans] == ["1", "2"]
    assert spans[0]["start"] == 0 and spans[0]["end"] == spans[1]["start"]
    assert spans[1]["end"] == tokens


def test_token_versions_follow_the_turns_and_the_engines_spans() -> None:
    def turn(prompt: list[int], completion: list[int], **extra: Any) -> dict[str, Any]:
        return {
            "type": "model",
            "prompt_ids": prompt,
            "completion_ids": completion,
            "logprobs": [0.0] * len(completion),
            "extends_previous": True,
            **extra,
        }

    spans = [{"version": "1", "start": 0, "end": 1}, {"version": "2", "start": 1, "end": 3}]
    trajectory = {
        "turns": [
            turn([1, 2], [3, 4, 5], policy_version=1, policy_version_tokens=spans),
            turn([6], [7], policy_version=2),  # only the new prompt tokens are kept
        ]
    }
    sequence = token_sequence(trajectory)
    assert sequence is not None
    assert sequence.completion_ids == [3, 4, 5, 6, 7]
    assert sequence.token_versions == ["1", "2", "2", None, "2"]


async def test_a_calls_floor_is_the_least_it_is_stamped_with(serving, client) -> None:
    """A call carrying its dispatch's floor is stamped with it when the server holds an older
    version (the push is late) or none; the server holds it from then on; a push or a floor
    set earlier than what the server holds changes nothing, whatever its value."""
    floor = policy_versions.FLOOR_HEADER
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        chat = url + "/v1/chat/completions"
        first = await client.post_json(
            "policy", chat, ASK, headers={floor: policy_versions.encode_floor(3, 300)}
        )
        assert first.data["policy_version"] == 3  # nothing held yet: the floor
        late = await client.post_json(
            "policy", url + "/policy_version", {"version": 2, "set_ns": 200}
        )
        assert late.status == 200 and late.data == {"version": 3}  # an older push: ignored
        plain = await client.post_json("policy", chat, ASK)
        assert plain.data["policy_version"] == 3  # held since the floor
        older = await client.post_json(
            "policy", chat, ASK, headers={floor: policy_versions.encode_floor(1, 100)}
        )
        assert older.data["policy_version"] == 3  # an older dispatch's floor: not lowered
        label = policy_versions.encode_floor("étape-4", 400)
        assert label.isascii()  # a header carries it whatever the label holds
        newer = await client.post_json("policy", chat, ASK, headers={floor: label})
        assert newer.data["policy_version"] == "étape-4"  # set later: a label replaces an int
        restart = await client.post_json("policy", url + "/policy_version", {"version": 0})
        assert restart.data == {"version": 0}  # set now (no set_ns): a new run may go back to 0
        broken = await client.post_json("policy", chat, ASK, headers={floor: "not json"})
        assert broken.status == 200 and broken.data["policy_version"] == 0
        bad = await client.post_json(
            "policy", url + "/policy_version", {"version": 1, "set_ns": "soon"}
        )
        assert bad.status == 400 and bad.data["field"] == "set_ns"
