"""TRL's GRPOTrainer trains on rollgym's rollouts: ``examples/trl_grpo.py`` run for real.

The trainer runs in vLLM's venv (TRL beside vLLM's torch; ``scripts/test.sh`` installs it
there once) on a tiny Llama written on the spot (``tiny_hf_llama.py``: nothing downloaded),
with rollgym's servers started by ``rollgym serve`` and this checkout's ``src`` on its path.
Two runs of five optimizer steps each: on rollgym's simulated model (its toy token ids, so
the tiny model gets a 50,000-entry vocabulary; multi-turn tool walks every time) and on vLLM's
CPU build serving the very model the trainer trains. Each checks that every sample of step
``k`` ran every model call under policy version ``k``, that what TRL trained on is the
recorded trajectories (the tokens it trained on are the model's own, the tool output masked),
that TRL logged a loss per step, and that ``rollgym traces check --data`` certifies the run.

On vLLM the loop is closed: vLLM runs in float32 with its dev-mode routes, the trainer saves
its weights after every step and vLLM reloads them, and after each reload the engine's
log-probabilities of a fixed probe equal the ones the trainer's own model computes within
:data:`TOLERANCE`. The same run with the reload left out must see the probe fail: the check
is what catches an engine serving other weights than the trainer holds.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import REPO, traces_check
from engine_support import (
    VLLM_INSTALLED,
    VLLM_MARKS,
    VLLM_MISSING,
    VLLM_PYTHON,
    VLLM_VENV,
    tiny_hf_model,
    vllm_env,
    vllm_server,
)

TRL_VERSION = "1.16.0"
TRL_INSTALLED = VLLM_VENV / f"rollgym-trl-{TRL_VERSION}.ok"  # written by scripts/test.sh
STEPS = 5
#: The simulated model's ids are hashes below this (builtins/models/toy_tokenizer.py).
TOY_VOCAB = 50_000
#: A fixed probe of the tiny model's vocabulary (test_vllm_weight_reload.py's).
PROBE_IDS = [1, 40, 41, 100, 200, 300, 400, 440, 42, 7]
#: vLLM's float32 CPU kernels against the trainer's float32 forward pass on the same weights
#: (measured gaps below 1e-5); one optimizer step at LEARNING_RATE moves them by far more.
TOLERANCE = 1e-3
LEARNING_RATE = "1e-3"
#: The trainer's reward: the share of generated ids in this range (no digit among them). A
#: random model scores differently on each sample: every step has advantages, weights move.
REWARD_IDS = "30:100"

if not TRL_INSTALLED.exists():
    pytest.skip(
        f"TRL is not installed in vLLM's venv {VLLM_VENV} (scripts/test.sh installs it there; "
        "ROLLGYM_SKIP_VLLM=1 or ROLLGYM_SKIP_TRL=1 skip that step)",
        allow_module_level=True,
    )

pytestmark = VLLM_MARKS


def train(model: Path, out: Path, *extra: str) -> list[dict[str, Any]]:
    """``examples/trl_grpo.py`` for :data:`STEPS` steps; its ``steps.jsonl``."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON"))},
        "PYTHONPATH": str(REPO / "src"),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "OTEL_SDK_DISABLED": "true",
    }
    command = [
        str(VLLM_PYTHON), str(REPO / "examples" / "trl_grpo.py"), "--model", str(model),
        "--output-dir", str(out), "--steps", str(STEPS), "--tasks-per-step", "2",
        "--generations", "2", *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [orjson.loads(line) for line in (out / "steps.jsonl").read_bytes().splitlines()]


def trajectories(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "trajectories.jsonl").read_bytes().splitlines()
    return {record["rollout_id"]: record for record in map(orjson.loads, lines)}


def check_run(steps: list[dict[str, Any]], out: Path) -> dict[str, dict[str, Any]]:
    """What both runs must show; the run's trajectories by rollout id."""
    assert [step["step"] for step in steps] == list(range(STEPS))
    recorded = trajectories(out)
    for step in steps:
        assert len(step["rollout_ids"]) == 4  # 2 tasks x 2 generations
        assert step["failures"] == 0, step
        # every model call of every sample of step k ran under version k
        assert all(calls and set(calls) == {step["step"]} for calls in step["policy_versions"])
        assert step["loss"] is not None  # TRL took an optimizer step on them
        for rollout_id, model_tokens, reward in zip(
            step["rollout_ids"], step["model_tokens"], step["rewards"], strict=True
        ):
            record = recorded[rollout_id]
            turns = [t for t in record["trajectory"]["turns"] if t["type"] == "model"]
            # the tokens TRL trains on are exactly what the engine generated, turn by turn
            assert model_tokens == sum(len(t["completion_ids"]) for t in turns), rollout_id
            assert all(t["policy_version"] == step["step"] for t in turns)
            assert reward == record["reward"]
    certify(out)
    return recorded


def certify(out: Path) -> None:
    """``rollgym traces check OUT --data`` passes on every rollout of the run."""
    checked = traces_check(out, "--data", env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"0 violations: {4 * STEPS} rollouts certified" in checked.stdout
    assert "policy versions required on every call" in checked.stdout


def test_grpo_trains_on_simulated_multi_turn_tool_rollouts(tmp_path: Path) -> None:
    model = tiny_hf_model(tmp_path / "model", TOY_VOCAB)
    out = tmp_path / "run"
    weights = tmp_path / "weights"
    steps = train(model, out, "--max-tokens", "64", "--weights-dir", str(weights))
    recorded = check_run(steps, out)
    # the weights of each step were saved for the model servers; only the newest is kept
    assert sorted(p.name for p in weights.iterdir()) == [f"step-{STEPS}"]
    assert (weights / f"step-{STEPS}" / "model.safetensors").is_file()
    # tool-using walks ran several model calls, and their tool output reached TRL masked
    env_tokens = [n for step in steps for n in step["env_tokens"]]
    assert any(n > 0 for n in env_tokens)
    tool_turns = [
        t for r in recorded.values() for t in r["trajectory"]["turns"] if t["type"] == "tool"
    ]
    assert tool_turns


def test_grpo_collects_one_batch_ahead(tmp_path: Path) -> None:
    """``--ahead``: each batch is collected while the trainer computes the step before, so its
    samples ran under that step's version or the one before, never older (max_staleness 1),
    and none had to be dropped."""
    model = tiny_hf_model(tmp_path / "model", TOY_VOCAB)
    out = tmp_path / "run"
    steps = train(model, out, "--max-tokens", "64", "--ahead")
    assert [step["step"] for step in steps] == list(range(STEPS))
    lags = [s["step"] - v for s in steps for calls in s["policy_versions"] for v in calls]
    assert len({tuple(calls) for s in steps for calls in s["policy_versions"]}) > 1
    assert lags and all(0 <= lag <= 1 for lag in lags), lags
    assert 1 in lags  # collected ahead: made under the version before the step's
    assert all(step["failures"] == 0 and step["loss"] is not None for step in steps), steps
    recorded = trajectories(out)
    for step in steps:
        for rollout_id in step["rollout_ids"]:
            turns = recorded[rollout_id]["trajectory"]["turns"]
            versions = [t["policy_version"] for t in turns if t["type"] == "model"]
            assert versions and all(step["step"] - 1 <= v <= step["step"] for v in versions)
    certify(out)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """vLLM's OpenAI server serving the tiny model the trainer trains: its URL and the model."""
    if not VLLM_INSTALLED.exists():
        pytest.skip(VLLM_MISSING)
    folder = tmp_path_factory.mktemp("vllm")
    model = tiny_hf_model(folder / "model")
    extra = (
        "--dtype", "float32",  # the trainer's dtype: the probe can be held to TOLERANCE
        "--enable-request-id-headers",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    )  # fmt: skip
    # VLLM_SERVER_DEV_MODE: /collective_rpc reload_weights, the trainer's weights
    with vllm_server(folder, model, *extra, env=vllm_env(VLLM_SERVER_DEV_MODE="1")) as url:
        yield url, model


def train_on_vllm(url: str, model: Path, out: Path, *extra: str) -> list[dict[str, Any]]:
    return train(
        model, out, "--engine", url, "--served-model-name", "tiny", "--max-tokens", "8",
        "--probe-ids", ",".join(map(str, PROBE_IDS)), "--probe-bound", str(TOLERANCE),
        "--learning-rate", LEARNING_RATE, "--reward-ids", REWARD_IDS, *extra,
    )  # fmt: skip


def probe_gaps(steps: list[dict[str, Any]]) -> dict[int, float]:
    """The probe's largest gap at each step's version (every step was checked)."""
    gaps = {}
    for step in steps:
        probe = step["probe"]
        assert probe is not None and probe["version"] == step["step"], step
        assert probe["error"] is None, probe
        gaps[step["step"]] = probe["max_abs_diff"]
    return gaps


def test_the_probe_catches_an_engine_that_did_not_reload(
    engine: tuple[str, Path], tmp_path: Path
) -> None:
    """The trainer steps, vLLM keeps its first weights: from version 1 on, the probe's gap is
    far over the tolerance (this is the check failing when the reload does not happen)."""
    url, model = engine
    steps = train_on_vllm(url, model, tmp_path / "run")
    gaps = probe_gaps(steps)
    print(f"\nprobe gaps without reload (max abs, per version): {gaps}")
    assert all(gaps[v] > 10 * TOLERANCE for v in range(1, STEPS)), gaps


def test_grpo_trains_on_vllm_rollouts(engine: tuple[str, Path], tmp_path: Path) -> None:
    url, model = engine
    out = tmp_path / "run"
    weights = tmp_path / "weights"
    steps = train_on_vllm(url, model, out, "--weights-dir", str(weights), "--sample-gaps")
    recorded = check_run(steps, out)
    # vLLM reloaded the trainer's weights after every step: its log-probabilities of the
    # probe are the trainer's own, version by version
    gaps = probe_gaps(steps)
    print(f"\nprobe gaps after reload (max abs, per version): {gaps}")
    assert all(gap <= TOLERANCE for gap in gaps.values()), gaps
    # and the samples' own log-probabilities, the engine's against the trainer's, per version
    samples = {s["step"]: s["sample_gap"] for s in steps}
    print(f"sample logprob gaps (per version): {samples}")
    for step, gap in samples.items():
        assert gap is not None and gap["version"] == step and gap["samples"] == 4, gap
        assert gap["max_abs_diff"] <= TOLERANCE, gap
    assert sorted(p.name for p in weights.iterdir()) == [f"step-{STEPS}"]
    # the ids are vLLM's, of the trainer's own vocabulary, not the simulated model's hashes
    vocab = orjson.loads((model / "config.json").read_bytes())["vocab_size"]
    turns = [t for r in recorded.values() for t in r["trajectory"]["turns"] if t["type"] == "model"]
    ids = {i for t in turns for i in t["completion_ids"]}
    assert ids and max(ids) < vocab < TOY_VOCAB
