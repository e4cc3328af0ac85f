"""What TRL's GRPOTrainer gets from rollgym's outcomes (rollgym.integrations.trl), without TRL:
the columns of a group (prompt ids, completion ids, logprobs, the mask that leaves tool output
out, rewards, versions), a failed member's row, and the dataset's rows and their repeats."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from rollgym.driver.outcomes import RolloutFailure, RolloutResult
from rollgym.integrations.loop_thread import LoopThread
from rollgym.integrations.trl import Columns, NoTokens, environment_reward, prompts_of
from rollgym.integrations.trl.rollouts import _rows_of, _whole

EOS = 2


def _tool_walk() -> dict[str, Any]:
    """A two-call tool loop as the recorder writes it with ``capture: tokens``: the second
    prompt extends the first prompt + completion with the tool's output (ids 50, 51, 52)."""
    return {
        "version": 1,
        "capture": "tokens",
        "model_calls": 2,
        "prefix_ok": True,
        "turns": [
            {
                "type": "model",
                "call": 0,
                "policy_version": 3,
                "prompt_start": 0,
                "prompt_ids": [1, 10, 11, 12],
                "completion_ids": [20, 21, 22],
                "logprobs": [-0.5, -0.25, -1.0],
            },
            {"type": "tool", "name": "read_key", "arguments": {"key": "k"}, "output": "next"},
            {
                "type": "model",
                "call": 1,
                "policy_version": 3,
                "extends_previous": True,
                "prompt_start": 7,
                "prompt_ids": [50, 51, 52],
                "completion_ids": [30, EOS],
                "logprobs": [-0.125, -2.0],
            },
            {"type": "verify", "answer": "x", "reward": 1.0},
        ],
    }


def _result(rollout_id: str, index: int, trajectory: dict[str, Any] | None) -> RolloutResult:
    return RolloutResult(
        rollout_id=rollout_id,
        task_index=0,
        rollout_index=index,
        attempt=0,
        dispatch_name="walker",
        reward=float(index == 0),
        duration_s=0.1,
        trace_id=None,
        started_at=0.0,
        finished_at=0.1,
        result={"reward": float(index == 0)},
        trajectory=trajectory,
        policy_versions=[3, 3],
    )


def _failure(index: int) -> RolloutFailure:
    return RolloutFailure(
        rollout_id=f"g0-0-r{index}",
        task_index=0,
        rollout_index=index,
        attempt=2,
        dispatch_name="walker",
        error_kind="stale",
        message="every attempt ran 2 versions behind",
    )


def test_a_tool_loop_is_one_row_with_the_tool_output_masked() -> None:
    columns = Columns()
    columns.add_group([_result("g0-0", 0, _tool_walk()), _result("g0-0-r1", 1, _tool_walk())], EOS)
    out = columns.as_dict()
    assert out["prompt_ids"] == [[1, 10, 11, 12]] * 2
    # the first completion, the tool's tokens, the second completion
    assert out["completion_ids"] == [[20, 21, 22, 50, 51, 52, 30, EOS]] * 2
    assert out["env_mask"] == [[1, 1, 1, 0, 0, 0, 1, 1]] * 2
    assert out["logprobs"] == [[-0.5, -0.25, -1.0, 0.0, 0.0, 0.0, -0.125, -2.0]] * 2
    assert out["env_reward"] == [1.0, 0.0]
    assert out["policy_versions"] == [[3, 3], [3, 3]]
    assert out["rollout_id"] == ["g0-0", "g0-0-r1"]
    assert out["error_kind"] == [None, None]
    # every column has one entry per completion, and each row's lists line up
    assert {len(values) for values in out.values()} == {2}
    for ids, mask, logprobs in zip(
        out["completion_ids"], out["env_mask"], out["logprobs"], strict=True
    ):
        assert len(ids) == len(mask) == len(logprobs)  # type: ignore[arg-type]


def test_a_failed_member_is_a_masked_row_without_reward() -> None:
    columns = Columns()
    columns.add_group([_failure(0), _result("g0-0-r1", 1, _tool_walk())], EOS)
    assert columns.prompt_ids[0] == [1, 10, 11, 12]  # its sibling's prompt
    assert columns.completion_ids[0] == [EOS]
    assert columns.env_mask[0] == [0]  # nothing of it is trained on
    assert columns.env_reward == [None, 0.0]  # TRL: unscorable, no advantage
    assert columns.error_kind == ["stale", None]
    assert columns.policy_versions[0] == []


def test_a_result_without_tokens_is_refused_by_name() -> None:
    turns_only = {"version": 1, "capture": "turns", "turns": [{"type": "model", "call": 0}]}
    with pytest.raises(NoTokens, match="rollout g0-0: .*capture_tokens=True"):
        Columns().add_group([_result("g0-0", 0, turns_only)], EOS)
    without_logprobs = _tool_walk()
    del without_logprobs["turns"][2]["logprobs"]
    with pytest.raises(NoTokens, match="without log-probabilities"):
        Columns().add_group([_result("g0-0", 0, without_logprobs)], EOS)


def test_the_dataset_holds_rows_and_the_batch_gets_them_back_with_fresh_ids() -> None:
    rows = [{"agent": "solver", "question": "1 + 2"}, {"agent": "walker", "seed": 4, "hops": 2}]
    prompts = [entry["prompt"] for entry in prompts_of(rows)]
    batch = [prompts[0], prompts[0], prompts[1], prompts[1]]  # TRL repeats each G=2 times
    assert _rows_of(batch, 2, prefix="g7") == [
        {**rows[0], "rollout_id": "g7-0"},
        {**rows[1], "rollout_id": "g7-1"},
    ]


def test_prompts_trl_did_not_group_are_refused() -> None:
    prompts = [entry["prompt"] for entry in prompts_of([{"a": 1}, {"a": 2}])]
    with pytest.raises(ValueError, match="not a multiple of num_generations=2"):
        _rows_of(prompts[:1] * 3, 2, prefix="g0")
    with pytest.raises(ValueError, match="prompts 0..1: TRL's repeats of one prompt"):
        _rows_of([prompts[0], prompts[1]], 2, prefix="g0")
    with pytest.raises(ValueError, match="prompt 0 is not a rollgym row as JSON.*prompts_of"):
        _rows_of(["What is 2 + 2?"], 1, prefix="g0")


def test_the_environment_reward_is_the_reward_function() -> None:
    assert environment_reward(env_reward=[1.0, None], prompts=["p", "p"]) == [1.0, None]


def test_the_loop_thread_runs_coroutines_on_its_own_thread_and_cancels_on_timeout() -> None:
    loop = LoopThread()
    try:

        async def where() -> str:
            return threading.current_thread().name

        assert loop.call(where()) == "rollgym-loop"
        cancelled = threading.Event()

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with pytest.raises(TimeoutError):
            loop.call(forever(), timeout=0.2)
        assert cancelled.wait(30)
    finally:
        loop.close()


def test_a_short_group_is_refused_with_its_failure() -> None:
    unreadable = RolloutFailure(
        rollout_id=None,
        task_index=3,
        rollout_index=None,
        attempt=0,
        dispatch_name=None,
        error_kind="invalid_row",
        message="row.sampling: n is refused",
    )
    with pytest.raises(RuntimeError, match="row 3: 1 of 2 .*invalid_row: row.sampling: n"):
        _whole([unreadable], 2)


def test_a_batch_record_names_each_field_and_the_probe_gap_without_its_replica() -> None:
    from rollgym.driver.weight_probe import ProbeGap
    from rollgym.integrations.trl.probe import SampleGap
    from rollgym.integrations.trl.rollouts import Batch

    probe = ProbeGap(3, "policy", "http://127.0.0.1:1", 0.01, 0.02, 0.5)
    gap = SampleGap(version=3, samples=2, tokens=9, mean_abs_diff=0.1, max_abs_diff=0.3)
    batch = Batch(3, ["0-0"], [[3]], [1.0], 0, [5], [2], probe=probe, sample_gap=gap)
    record = batch.as_dict()
    assert list(record) == [
        "step",
        "rollout_ids",
        "policy_versions",
        "rewards",
        "failures",
        "model_tokens",
        "env_tokens",
        "probe",
        "sample_gap",
    ]
    assert record["probe"] == {
        "version": 3,
        "mean_abs_diff": 0.01,
        "max_abs_diff": 0.02,
        "bound": 0.5,
        "error": None,
    }
    assert record["sample_gap"] == {
        "version": 3,
        "samples": 2,
        "tokens": 9,
        "mean_abs_diff": 0.1,
        "max_abs_diff": 0.3,
    }
    assert Batch(1, [], [], [], 0, [], []).as_dict()["probe"] is None
