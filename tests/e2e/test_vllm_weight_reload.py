"""Weights from the trainer to a real vLLM, and the engine checked against the trainer.

vLLM's CPU build (its venv, as ``test_real_vllm.py``) serves the tiny local model with
``VLLM_SERVER_DEV_MODE=1`` and float32 weights; rollgym's ``openai`` proxy (``rollgym serve``)
stands in front of it. The trainer's side is ``tiny_checkpoint.py`` in vLLM's venv: a second
checkpoint with every weight moved (saved with ``save_pretrained``) and the log-probabilities
of a fixed probe sequence under both, computed with transformers.

Checked: after ``set_policy_version(v, weights=...)`` the engine's prompt log-probabilities
of the probe equal the trainer's for those weights within :data:`TOLERANCE`, and not the
other checkpoint's (so the check fails when the reload is skipped); a call in flight during
the swap keeps the old stamp; a checkpoint that cannot be loaded raises one line naming the
server and leaves the old weights serving; ``rollgym run`` with a JSON version file loads its
weights before the first rollout and records the probe's gap in ``summary.json``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_support import HERE, Job, wait_for
from engine_support import (
    VLLM_MARKS,
    VLLM_PYTHON,
    running,
    skip_without_vllm,
    tiny_hf_model,
    vllm_env,
    vllm_server,
)

from rollgym import Collector
from rollgym.driver.weight_probe import Probe, check
from rollgym.errors import ServerCallError
from rollgym.http.client import HttpClient
from server_specs import proxied_servers

MODEL = "tiny"
#: A fixed probe: token ids of the tiny model's vocabulary (445 ids: its BPE trains on little).
PROBE_IDS = [1, 40, 41, 100, 200, 300, 400, 440, 42, 7]
#: vLLM's float32 CPU kernels against transformers' eager float32 forward pass: measured
#: gaps are below 1e-5; the two checkpoints differ by 1 to 10 per token.
TOLERANCE = 1e-3

skip_without_vllm()

pytestmark = VLLM_MARKS


@dataclass(frozen=True)
class Checkpoints:
    """The model vLLM starts with, the trainer's next step, and the trainer's numbers."""

    base: Path
    step: Path
    base_logprobs: list[float]
    step_logprobs: list[float]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    folder = tmp_path_factory.mktemp("checkpoints")
    base, step = folder / "base", folder / "step-2"
    tiny_hf_model(base)
    trained = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "tiny_checkpoint.py"), str(base), str(step)]
        + [json.dumps(PROBE_IDS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr
    numbers = json.loads(trained.stdout.strip().splitlines()[-1])
    return Checkpoints(base, step, numbers["base"], numbers["perturbed"])


@pytest.fixture(scope="module")
def engine(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server with its dev-mode routes, serving the base checkpoint."""
    folder = tmp_path_factory.mktemp("vllm")
    env = vllm_env(VLLM_SERVER_DEV_MODE="1")  # /collective_rpc and /reset_prefix_cache
    with vllm_server(
        folder, checkpoints.base, "--dtype", "float32", env=env, max_model_len=512
    ) as url:
        yield url


def _servers(engine_url: str) -> dict[str, Any]:
    return proxied_servers(engine_url, MODEL, solver={"sampling": {"max_tokens": 4}})


@pytest.fixture(scope="module")
def served(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``rollgym serve`` of the proxy, the arithmetic environment and a single-turn agent."""
    job = Job(tmp_path_factory.mktemp("serve"))
    job.write(_servers(engine), [])
    proc = job.serve("solver")
    try:
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().split() for _ in range(4))
        assert {"policy", "solver"} <= set(urls), urls
        yield urls
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _gap(found: list[Any]) -> float:
    (only,) = found
    assert only.error is None, only.error
    return float(only.max_abs_diff)


def test_weights_reload_into_vllm_and_the_probe_checks_them(
    checkpoints: Checkpoints, engine: str, served: dict[str, str], tmp_path: Path
) -> None:
    base = Probe(PROBE_IDS, checkpoints.base_logprobs, bound=TOLERANCE)
    step = Probe(PROBE_IDS, checkpoints.step_logprobs, bound=TOLERANCE)
    long_call = {
        "messages": [{"role": "user", "content": "Compute: 1 + 2"}],
        "max_tokens": 200,
        "ignore_eos": True,  # vLLM's: a long generation, in flight while the weights swap
    }

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Collector(
            {"solver": served["solver"]},
            agent="solver",
            model_servers={"policy": served["policy"]},
        ) as collector:
            await collector.set_policy_version(1, probe=base)
            # the trainer believes it stepped, but the reload is skipped: the probe sees it
            await collector.set_policy_version(2, probe=step)
            await collector.set_policy_version(3, weights=checkpoints.step, probe=step)
            seen["after_step"] = await collector.client.get_json(
                "policy", served["policy"] + "/policy_version"
            )
            in_flight = asyncio.ensure_future(
                collector.client.post_json(
                    "policy", served["policy"] + "/v1/chat/completions", long_call, timeout=300
                )
            )
            # the swap begins while vLLM generates it (its own running count says so)
            started = await asyncio.to_thread(
                wait_for, lambda: in_flight.done() or running(engine) >= 1, timeout=120
            )
            seen["generating"] = started and not in_flight.done()
            await collector.set_policy_version(4, weights=checkpoints.base, probe=base)
            seen["in_flight"] = (await in_flight).data
            try:
                await collector.set_policy_version(5, weights=tmp_path / "missing")
            except ServerCallError as exc:
                seen["refused"] = str(exc)
            seen["current"] = collector.policy_version
            async with HttpClient() as client:  # the old weights still serve
                seen["still_base"] = await check(client, [("policy", served["policy"])], 4, base)
            outcomes = [o async for o in collector.stream([{"question": "2 + 2"}] * 3)]
            seen["versions"] = [o.policy_versions for o in outcomes]
            seen["gaps"] = collector.probe_gaps
            seen["summary"] = collector.probes.summary()
        return seen

    seen = asyncio.run(main())
    gaps = {g.version: g for g in seen["gaps"]}
    print(f"\nprobe gaps (max abs): { {v: g.max_abs_diff for v, g in gaps.items()} }")
    assert _gap([gaps[1]]) <= TOLERANCE  # the weights vLLM started with
    assert gaps[2].over and _gap([gaps[2]]) > 100 * TOLERANCE  # no reload: caught
    assert _gap([gaps[3]]) <= TOLERANCE  # reloaded: the trainer's step
    assert _gap([gaps[4]]) <= TOLERANCE  # and back
    assert seen["after_step"].data == {"version": 3, "weights": str(checkpoints.step)}
    assert seen["generating"], "the long call was not running at vLLM when the swap began"
    # the call in flight finished under the weights it started with, stamped with them
    assert seen["in_flight"]["policy_version"] == 3
    assert "policy_version_end" not in seen["in_flight"]
    assert seen["in_flight"]["usage"]["completion_tokens"] == 200
    assert "model server 'policy'" in seen["refused"]
    assert f"no checkpoint folder at {tmp_path / 'missing'}" in seen["refused"]
    assert seen["current"] == 4
    assert _gap(seen["still_base"]) <= TOLERANCE
    assert seen["versions"] == [[4], [4], [4]]
    assert seen["summary"]["2"]["over_bound"] is True
    assert seen["summary"]["3"]["over_bound"] is False


def test_a_run_loads_the_version_files_weights_first(
    checkpoints: Checkpoints, engine: str, tmp_path: Path
) -> None:
    job = Job(tmp_path / "job")
    version_file = tmp_path / "version.json"
    version_file.write_text(
        json.dumps(
            {
                "version": 7,
                "weights": checkpoints.step.name,  # read from the file's folder
                "probe": {
                    "token_ids": PROBE_IDS,
                    "logprobs": checkpoints.step_logprobs,
                    "bound": TOLERANCE,
                },
            }
        )
    )
    (tmp_path / checkpoints.step.name).symlink_to(checkpoints.step)
    job.write(
        _servers(engine),
        [{"question": f"{i} + 1"} for i in range(6)],
        agent="solver",
        concurrency=3,
        policy_version_file=str(version_file),
    )
    result = job.run(timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [r["policy_versions"] for r in job.rollouts] == [[7]] * 6
    probes = job.summary["probes"]
    assert set(probes) == {"7"} and probes["7"]["over_bound"] is False
    assert probes["7"]["max_abs_diff"] <= TOLERANCE
    assert not [w for w in job.summary["warnings"] if "weight probe" in w]
