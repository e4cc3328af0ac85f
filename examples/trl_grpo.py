"""TRL's GRPOTrainer trained on rollgym's rollouts: arithmetic, tool-using keychain walks and
keychain episodes, each step's samples stamped with that step's policy version.

Run it with a Python that has rollgym and TRL (``pip install 'rollgym[trl]'``):

    # an engine serving the model the trainer trains (the same weights and tokenizer),
    # reloading the trainer's weights after every step and checked against them:
    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL_DIR --served-model-name policy-model \\
        --dtype float32 --enable-auto-tool-choice --tool-call-parser hermes --port 8000
    python examples/trl_grpo.py --model MODEL_DIR --engine http://127.0.0.1:8000 \\
        --served-model-name policy-model --steps 50 --output-dir runs/trl \\
        --weights-dir runs/trl/weights --probe-ids 1,40,41,100,200 --probe-bound 1e-3 \\
        --sample-gaps

    # without an engine: rollgym's simulated model answers token ids of its own toy
    # tokenizer (ids below 50,000), so the trained model needs a vocabulary that large
    python examples/trl_grpo.py --model MODEL_DIR --steps 20 --output-dir runs/trl-sim

The script starts rollgym's servers (``rollgym serve``: the model proxy, the environments and
the agents) and stops them at the end. It writes, under ``--output-dir``: ``rollouts.jsonl``,
``trajectories.jsonl`` and ``failures.jsonl`` (what the trainer learned from, as ``rollgym run``
writes them: ``rollgym traces check DIR --data`` certifies them), ``steps.jsonl`` (per step:
the rollouts, their policy versions, their rewards, the loss) and ``trainer/`` (TRL's own).
docs/training.md ("TRL") explains each piece.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def servers(engine: str | None, served_model_name: str, max_tokens: int) -> dict[str, Any]:
    """rollgym's servers: a model server in front of the engine (or the simulated model), the
    arithmetic and keychain environments, a single-turn and a tool-loop agent."""

    def sampling() -> dict[str, int]:
        return {"max_tokens": max_tokens}

    if engine is None:
        model: dict[str, Any] = {
            "policy": {
                "kind": "model",
                "impl": "simulated",
                "accuracy": 0.5,
                "latency": {"kind": "fixed", "seconds": 0},
            }
        }
    else:
        model = {
            "engine": {"kind": "model", "url": engine},
            "policy": {
                "kind": "model",
                "impl": "openai",
                "upstream": "engine",
                "model_name": served_model_name,
                "request_id": "header",
            },
        }
    return {
        **model,
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "keys": {
            "kind": "environment",
            "impl": "keychain",
            "model": "policy",
            "max_turns": 4,
            "sampling": sampling(),
        },
        "solver": {
            "kind": "agent",
            "impl": "single_turn",
            "model": "policy",
            "environment": "arith",
            "sampling": sampling(),
        },
        "walker": {
            "kind": "agent",
            "impl": "tool_loop",
            "model": "policy",
            "environment": "keys",
            "max_turns": 4,
            "sampling": sampling(),
        },
    }


def task_rows() -> list[dict[str, Any]]:
    """The quickstart's rows: arithmetic (``solver``), keychain walks with tools (``walker``)
    and keychain episodes the environment plays itself (routed by ``task_id.taskset``)."""
    lines = (HERE / "quickstart.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@contextmanager
def rollgym_serve(config: dict[str, Any], folder: Path) -> Iterator[dict[str, str]]:
    """``rollgym serve`` of ``config``: yields ``{server name: URL}`` once all are up."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "servers.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (folder / "serve.log").open("w", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollgym", "serve", str(path)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "OTEL_SDK_DISABLED": os.environ.get("OTEL_SDK_DISABLED", "true")},
    )
    try:
        assert proc.stdout is not None
        urls: dict[str, str] = {}
        while set(urls) < set(config["servers"]):
            line = proc.stdout.readline()
            if not line:
                sys.exit(f"rollgym serve ended early; see {folder / 'serve.log'}")
            name, url = line.split()
            urls[name] = url
        yield urls
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def reward_ids(low: int, high: int) -> Any:
    """A reward TRL computes itself (in place of the environment's): the share of the
    completion's ids in ``[low, high)`` (for a single-turn agent, all of them the model's).
    A random tiny model already scores differently on each sample, so every group has an
    advantage to learn from, and it learns it in a few dozen steps (bench/closed_loop.py).
    Pick ids that decode to no digit: the arithmetic environment still grades each answer."""

    def reward(
        *, completion_ids: list[list[int]], error_kind: list[str | None] | None = None, **_: Any
    ) -> list[float | None]:
        failed = error_kind or [None] * len(completion_ids)
        scores: list[float | None] = []
        for ids, error in zip(completion_ids, failed, strict=True):
            # a failed (or stale) rollout's row holds one filler id: no reward, no advantage
            hits = sum(low <= i < high for i in ids)
            scores.append(None if error else hits / max(len(ids), 1))
        return scores

    reward.__name__ = f"ids_in_{low}_{high}"
    return reward


def _id_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    return int(low), int(high)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the model the trainer trains (HF dir)")
    parser.add_argument(
        "--engine", help="URL of an OpenAI-compatible engine serving --model (default: simulated)"
    )
    parser.add_argument("--served-model-name", default="tiny", help="the engine's model name")
    parser.add_argument("--output-dir", type=Path, required=True, help="where the run's files go")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--tasks-per-step", type=int, default=2, help="rows (groups) a step")
    parser.add_argument("--generations", type=int, default=2, help="rollouts per row (G)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per model call")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="the optimizer's")
    parser.add_argument(
        "--weights-dir",
        type=Path,
        help="save the weights here after each step and have the model servers load them",
    )
    parser.add_argument(
        "--probe-ids",
        type=lambda text: [int(i) for i in text.split(",")],
        help="comma-separated token ids: after each step check the engine's log-probabilities "
        "of them against the trainer's",
    )
    parser.add_argument(
        "--probe-bound", type=float, default=0.05, help="largest probe gap not warned about"
    )
    parser.add_argument(
        "--reward-ids",
        type=_id_range,
        metavar="LOW:HIGH",
        help="train on the share of generated token ids in [LOW, HIGH) (not the environment's)",
    )
    parser.add_argument(
        "--ahead",
        action="store_true",
        help="collect one batch ahead of the trainer (max_staleness 1) from the rows, cycled",
    )
    parser.add_argument(
        "--sample-gaps",
        action="store_true",
        help="per step, compare the engine's logprobs of the samples with the trainer's",
    )
    args = parser.parse_args(argv)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rollgym import Collector
    from rollgym.integrations.trl import RollgymRollouts, environment_reward, prompts_of

    out: Path = args.output_dir
    config = {
        # ``rollgym serve`` reads a job config; its run: block is not used (the trainer runs)
        "run": {"input": str(HERE / "quickstart.jsonl"), "output_dir": str(out / "servers")},
        "servers": servers(args.engine, args.served_model_name, args.max_tokens),
        "telemetry": {"preset": "off", "exporter": "none"},
    }
    with rollgym_serve(config, out / "servers") as urls:
        collector = Collector(
            urls,
            agent="solver",
            environment_routes={"keychain_episodes": "keys"},
            model_servers={"policy": urls["policy"]},
            capture_tokens=True,
            # on demand, every sample is made by the weights of its step; ahead, by them or
            # the step before's
            max_staleness=1 if args.ahead else 0,
            concurrency=args.tasks_per_step * args.generations,
            timeout_s=300,
        )
        rollouts = RollgymRollouts(
            collector,
            output_dir=out,
            weights_dir=args.weights_dir,
            probe_token_ids=args.probe_ids,
            probe_bound=args.probe_bound,
            sample_gaps=args.sample_gaps,
            ahead=itertools.cycle(task_rows()) if args.ahead else None,
        )
        training = GRPOConfig(
            output_dir=str(out / "trainer"),
            max_steps=args.steps,
            per_device_train_batch_size=args.tasks_per_step * args.generations,
            num_generations=args.generations,
            learning_rate=args.learning_rate,
            beta=0.0,  # no reference model: half the forward passes on a CPU
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            bf16=False,
            seed=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=[
                environment_reward if args.reward_ids is None else reward_ids(*args.reward_ids)
            ],
            args=training,
            train_dataset=Dataset.from_list(prompts_of(task_rows())),
            rollout_func=rollouts,
            callbacks=[rollouts.callback()],
        )
        with rollouts:
            trainer.train()
    logged = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    with (out / "steps.jsonl").open("w", encoding="utf-8") as steps:
        for batch in rollouts.batches:
            entry = logged.get(batch.step + 1, {})
            record = {**batch.as_dict(), "loss": entry.get("loss"), "reward": entry.get("reward")}
            steps.write(json.dumps(record) + "\n")
    for batch in rollouts.batches:
        rewards = [r for r in batch.rewards if r is not None]
        mean = sum(rewards) / len(rewards) if rewards else float("nan")
        versions = sorted({str(v) for calls in batch.policy_versions for v in calls})
        probe = "" if batch.probe is None else f", probe gap {batch.probe.max_abs_diff}"
        if batch.sample_gap is not None:
            probe += f", sample gap {batch.sample_gap.max_abs_diff}"
        print(f"step {batch.step}: {len(batch.rewards)} samples, reward {mean:.3f}, "
              f"versions {','.join(versions)}, failures {batch.failures}, "
              f"model/env tokens {sum(batch.model_tokens)}/{sum(batch.env_tokens)}{probe}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
