"""Weights pushed with a version, and the probe that checks the engine afterwards.

The Collector is run against real simulated model servers on loopback (uvicorn in this
event loop): every replica loads the checkpoint before the version becomes the dispatches'
floor; one that cannot raises a line naming it and leaves the driver's version as it was.
The probe's arithmetic and vLLM's answer shape are checked here; the real engine in
tests/e2e/test_vllm_weight_reload.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from rollgym import Collector
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.driver.version_file import VersionSet, follow_version_file, read_version
from rollgym.driver.weight_probe import Probe, ProbeGap, ProbeLog, gap, prompt_logprobs
from rollgym.errors import ServerCallError
from rollgym.http.server import create_app
from rollgym.servers.base import Server
from uvicorn_thread import uvicorn_in_loop


def _serving(server: Server) -> AbstractAsyncContextManager[str]:
    return uvicorn_in_loop(create_app(server), lifespan="on")


def _vllm_answer(entries: list[Any]) -> dict[str, Any]:
    """A completion answer as vLLM shapes ``prompt_logprobs`` (None for the first token)."""
    return {"choices": [{"index": 0, "text": "x", "prompt_logprobs": entries}]}


def test_the_engines_prompt_logprobs_are_read_and_compared() -> None:
    answer = _vllm_answer(
        [
            None,
            {"7": {"logprob": -1.5, "rank": 3, "decoded_token": "a"}},
            {"9": {"logprob": -0.25, "rank": 1}, "4": {"logprob": -0.1, "rank": 1}},
        ]
    )
    assert prompt_logprobs(answer, [1, 7, 9]) == [-1.5, -0.25]
    assert gap([-1.5, -0.25], [-1.0, -0.25]) == (0.25, 0.5)
    with pytest.raises(ValueError, match="no prompt_logprobs"):
        prompt_logprobs(_vllm_answer(None), [1, 7, 9])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no log-probability for token 2"):
        prompt_logprobs(answer, [1, 7, 8])
    with pytest.raises(ValueError, match="2 prompt log-probabilities for 3 tokens"):
        prompt_logprobs(_vllm_answer([None, {}]), [1, 7, 9])


async def test_a_probe_takes_numbers_or_a_callable() -> None:
    assert await Probe([1, 2, 3], [-1.0, -2.0]).trainer_logprobs() == [-1.0, -2.0]

    async def computed(ids: Any) -> list[float]:
        return [-0.5] * (len(ids) - 1)

    assert await Probe([1, 2, 3], computed).trainer_logprobs() == [-0.5, -0.5]
    with pytest.raises(ValueError, match="one number per token after the first"):
        Probe([1, 2, 3], [-1.0])
    with pytest.raises(ValueError, match="at least two token ids"):
        Probe([1], [])
    with pytest.raises(ValueError, match="one number per token"):
        await Probe([1, 2], lambda ids: [0.0, 0.0]).trainer_logprobs()


def test_the_log_of_gaps_is_per_version_with_its_warnings() -> None:
    log = ProbeLog(
        [
            ProbeGap(3, "policy", "http://a", 0.001, 0.002, 0.05),
            ProbeGap(3, "policy", "http://b", 0.002, 0.004, 0.05),
            ProbeGap(4, "policy", "http://a", 0.5, 2.0, 0.05),
            ProbeGap(4, "policy", "http://b", None, None, 0.05, "the probe was refused"),
        ]
    )
    summary = log.summary()
    assert summary["3"] == {
        "mean_abs_diff": 0.002,
        "max_abs_diff": 0.004,
        "bound": 0.05,
        "replicas": 2,
        "over_bound": False,
    }
    four = summary["4"]
    assert isinstance(four, dict) and four["over_bound"] is True
    assert four["errors"] == ["the probe was refused"]
    warnings = log.warnings()
    assert len(warnings) == 2 and "differ from the trainer's by up to 2" in warnings[0]
    assert "(http://b) at policy version 4: the probe was refused" in warnings[1]


async def test_every_replica_loads_before_the_version_holds(tmp_path: Path, caplog) -> None:
    slow = {"latency": {"kind": "fixed", "seconds": 0.05}}
    first, second = SimulatedModel.build("policy", slow), SimulatedModel.build("policy", slow)
    async with _serving(first) as one, _serving(second) as two:
        collector = Collector(
            {"agent": "http://127.0.0.1:9"},
            agent="agent",
            model_servers={"policy": one},
            replicas={"policy": [one, two]},
            policy_version=1,
        )
        async with collector:
            with caplog.at_level(logging.WARNING, logger="rollgym.driver.weight_probe"):
                await collector.set_policy_version(
                    2, weights=tmp_path, probe=Probe([1, 2, 3], [-1.0, -1.0])
                )
            assert (first.policy_version, second.policy_version) == (2, 2)
            assert first.weights == second.weights == str(tmp_path)
            assert collector.policy_version == 2
            # the simulated engine gives no prompt log-probabilities: a warning, not a failure
            assert [g.error for g in collector.probe_gaps] == [
                "the engine gave no prompt_logprobs (vLLM gives them on /v1/completions)"
            ] * 2
            assert "weight probe: model server 'policy'" in caplog.text
            missing = tmp_path / "step-3"
            with pytest.raises(ServerCallError) as refused:
                await collector.set_policy_version(3, weights=missing)
            assert "model server 'policy'" in str(refused.value)
            assert f"no checkpoint at {missing}" in str(refused.value)
            assert collector.policy_version == 2  # not a floor: no replica loaded it
            assert first.policy_version == 2 and first.weights == str(tmp_path)


async def test_a_collector_without_model_servers_refuses_weights(tmp_path: Path) -> None:
    async with Collector({"agent": "http://127.0.0.1:9"}, agent="agent") as collector:
        with pytest.raises(ServerCallError, match="no model server to load weights"):
            await collector.set_policy_version(1, weights=tmp_path)
        assert collector.policy_version is None


def test_the_version_file_names_weights_and_a_probe(tmp_path: Path) -> None:
    path = tmp_path / "version.json"
    probe = {"token_ids": [1, 2], "logprobs": [-0.5], "bound": 0.1}
    path.write_text(json.dumps({"version": 3, "weights": "ckpt/3", "probe": probe}))
    assert read_version(path) == VersionSet(3, str(tmp_path / "ckpt/3"), Probe([1, 2], [-0.5], 0.1))
    path.write_text("4\n")
    assert read_version(path) == VersionSet(4)
    for bad in ({"version": True}, {"version": 1, "weight": "x"}, {"version": 1, "probe": []}):
        path.write_text(json.dumps(bad))
        assert read_version(path) is None


def test_the_version_file_hands_its_weights_to_the_collector(tmp_path: Path) -> None:
    told: list[tuple[Any, Any, Any]] = []

    class Target:
        async def set_policy_version(
            self, version: Any, *, weights: Any = None, probe: Any = None
        ) -> None:
            told.append((version, weights, probe))

    path = tmp_path / "version.json"
    path.write_text(json.dumps({"version": 5, "weights": str(tmp_path)}))

    async def main() -> None:
        async with follow_version_file(Target(), path):
            pass

    asyncio.run(main())
    assert told == [(5, str(tmp_path), None)]
