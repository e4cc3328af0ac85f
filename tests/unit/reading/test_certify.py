"""The data rules on hand-made turns of the shapes real engines answer (the end-to-end test
damages a real run; these cover what that run cannot produce: n > 1, llama.cpp's turns
without token ids, a turns-only capture, ids sent as UUIDs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollgym.reading.certify import Certifier, run_facts
from rollgym.reading.engine_calls import EngineCall
from rollgym.servers.request_ids import upstream_uuid


def _turn(call: int, **fields: Any) -> dict[str, Any]:
    return {"type": "model", "call": call, "finish_reason": "stop", **fields}


def _record(*turns: dict[str, Any], capture: str = "tokens") -> dict[str, Any]:
    return {"rollout_id": "3-0", "trajectory": {"capture": capture, "turns": list(turns)}}


def _found(certifier: Certifier, record: dict[str, Any]) -> list[tuple[int | None, str]]:
    return [(v.turn, v.rule) for v in certifier.check(record)]


def test_every_choice_of_an_n_2_call_is_counted_and_kept() -> None:
    turn = _turn(
        0,
        n=2,
        usage={"prompt_tokens": 3, "completion_tokens": 5},
        prompt_start=0,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        logprobs=[-0.1, -0.2],
        other_choices=[{"completion_ids": [6, 7, 8], "finish_reason": "stop"}],
    )
    engine = {"3-0.0": EngineCall(3, 5, 2)}  # two sub-requests, one call
    assert _found(Certifier(engine, versions_required=False), _record(turn)) == []
    turn["other_choices"] = []  # the second choice dropped: usage still counts it
    assert _found(Certifier(engine, versions_required=False), _record(turn)) == [
        (0, "dropped_choice"),
        (0, "token_counts"),
    ]


def test_llama_cpp_turns_without_ids_are_held_to_their_usage() -> None:
    """llama.cpp's server answers log-probabilities and usage, no token ids: each turn says
    so, its prompts cannot be compared, its log-probabilities must cover its usage's count."""
    missing = {"tokens_missing": True, "missing": ["prompt_ids", "completion_ids"]}
    first = _turn(0, usage={"prompt_tokens": 9, "completion_tokens": 3}, logprobs=[-1.0] * 3)
    second = _turn(1, usage={"prompt_tokens": 14, "completion_tokens": 2}, logprobs=[-1.0])
    record = _record({**first, **missing}, {**second, **missing})
    assert _found(Certifier({}, versions_required=False), record) == [(1, "logprobs_cover")]


def test_a_turns_only_capture_keeps_the_answer_rules() -> None:
    turn = _turn(0, usage={"prompt_tokens": 9, "completion_tokens": 3}, finish_reason=None)
    record = _record(turn, _turn(1), capture="turns")
    assert _found(Certifier({}, versions_required=True), record) == [
        (0, "finish_reason"),
        (0, "policy_version"),
        (1, "policy_version"),
        (1, "token_counts"),  # no usage answered: nothing to hold its counts against
    ]


def test_the_request_id_a_turn_names_and_an_id_sent_as_a_uuid() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 3}
    named = _turn(0, usage=usage, request_id="3-0.5")
    assert (
        _found(
            Certifier({"3-0.5": EngineCall(9, 3, 1)}, versions_required=False),
            _record(named, capture="turns"),
        )
        == []
    )
    by_uuid = {upstream_uuid("3-0.0"): EngineCall(9, 4, 1)}
    assert _found(
        Certifier(by_uuid, versions_required=False), _record(_turn(0, usage=usage), capture="turns")
    ) == [(0, "token_counts")]
    # a rollout whose trace was not sampled has no engine span to miss
    certifier = Certifier(
        {"9-9.0": EngineCall(1, 1, 1)}, versions_required=False, unsampled=frozenset({"3-0"})
    )
    assert _found(certifier, _record(_turn(0, usage=usage), capture="turns")) == []
    certifier = Certifier({"9-9.0": EngineCall(1, 1, 1)}, versions_required=False)
    assert _found(certifier, _record(_turn(0, usage=usage), capture="turns")) == [
        (0, "token_counts")
    ]


def test_a_trajectory_that_dropped_turns_is_incomplete() -> None:
    record = _record(_turn(0, usage={"prompt_tokens": 1, "completion_tokens": 0}), capture="turns")
    record["trajectory"]["dropped_turns"] = 3
    assert _found(Certifier({}, versions_required=False), record) == [(None, "incomplete")]


@pytest.mark.parametrize(
    "damage",
    [b"run:\n  policy_version_file: \xff\n", b"run: [\n", b"\x00", b""],
    ids=["not-utf8", "not-yaml", "nul", "empty"],
)
def test_a_damaged_config_of_the_run_is_read_as_none_not_a_traceback(
    tmp_path: Path, damage: bytes
) -> None:
    """``traces check --data`` and ``export --certified-only`` read the run's config.yaml for
    ``run.policy_version_file``: a damaged one says nothing about versions (the rollout lines
    still can), it never stops the check."""
    (tmp_path / "config.yaml").write_bytes(damage)
    (tmp_path / "rollouts.jsonl").write_text(
        '{"rollout_id": "1-0", "policy_versions": ["v3"]}\n'
        '{"rollout_id": "2-0", "trace_sampled": false}\n'
    )
    facts = run_facts(tmp_path)
    assert facts.versions_reason == "rollout 1-0 ran under policy versions ['v3']"
    assert facts.unsampled == frozenset({"2-0"})
