"""The closed loop, side by side: TRL's GRPOTrainer on rollgym's asynchronous rollouts from
vLLM (weights reloaded after every step) against TRL generating for itself, in one run.

Both arms train the same tiny Llama (``tests/e2e/tiny_hf_llama.py``, written on the spot:
nothing downloaded) from the same initial weights, with the same sizes (groups per step,
generations per group, tokens per completion, learning rate, seed) and the same reward, one
a random tiny model can learn in a few dozen steps: the share of the tokens it generates
whose id is in ``--reward-ids`` (by default ids that decode to letters and punctuation).

- **rollgym**: vLLM's CPU build (float32, ``VLLM_SERVER_DEV_MODE=1``) behind rollgym's
  ``openai`` model server; ``RollgymRollouts(ahead=...)`` collects the next batch while the
  trainer computes its step (``max_staleness=1``); after each step the trainer's weights are
  saved and vLLM reloads them, and the engine's log-probabilities of a fixed probe are
  checked against the trainer's.
- **TRL**: ``GRPOTrainer`` without ``rollout_func``: it generates with transformers, in the
  trainer's process, between steps.

Each arm runs ``--repeats`` times, alternated (vLLM up only during its own arm), and the
fastest run of each counts: the machine's other load slows either. Prints steps per minute
of each arm (``trainer.train()`` alone, wall clock) and their ratio,
the mean reward per step of each (TRL's own log), rollgym's probe gaps and stale samples, and
writes it all as JSON (``--json``). ``plot`` draws the JSON's curves as a PNG (matplotlib).
Run with the Python of vLLM's venv (TRL and vLLM beside one torch; ``scripts/test.sh``)::

    PYTHONPATH=src ~/.cache/rollgym-vllm/venv/bin/python bench/closed_loop.py \\
        --steps 30 --json /tmp/closed_loop.json
    ~/.cache/rollgym-mlflow/venv/bin/python bench/closed_loop.py plot /tmp/closed_loop.json \\
        docs/img/closed_loop.png
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
PROBE_IDS = [1, 40, 41, 100, 200, 300, 400, 440, 42, 7]
PROBE_BOUND = 1e-3


def tiny_model(out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "e2e" / "tiny_hf_llama.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        sys.exit(f"could not write the tiny model: {done.stderr[-2000:]}")
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def vllm(model: Path, log: Path) -> Iterator[str]:
    """vLLM's OpenAI server on the tiny model, float32, with its weight-reload route."""
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON"))},
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "2048", "--dtype", "float32", "--enforce-eager",
        "--enable-request-id-headers",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 900
            while True:
                if proc.poll() is not None:
                    sys.exit(f"vLLM ended while starting; see {log}")
                if time.monotonic() > deadline:
                    sys.exit(f"vLLM did not answer within 900 s; see {log}")
                try:
                    with urllib.request.urlopen(url + "/v1/models", timeout=5):
                        break
                except OSError:
                    time.sleep(2)
            # a chat call first (vLLM's CPU build wants one before anything else)
            warm = urllib.request.Request(
                url + "/v1/chat/completions",
                data=b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], '
                b'"max_tokens": 2}',
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(warm, timeout=300):
                pass
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def solver_rows() -> list[dict[str, Any]]:
    from trl_grpo import task_rows

    return [row for row in task_rows() if row.get("agent") == "solver"]


def config(args: argparse.Namespace, out: Path) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.tasks_per_step * args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        learning_rate=args.learning_rate,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )


def curve(trainer: Any) -> list[float]:
    return [e["reward"] for e in trainer.state.log_history if "reward" in e and "loss" in e]


def rollgym_arm(args: argparse.Namespace, model: Path, engine: str, out: Path) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOTrainer
    from trl_grpo import reward_ids, rollgym_serve, servers

    from rollgym import Collector
    from rollgym.integrations.trl import RollgymRollouts, prompts_of

    rows = solver_rows()
    job = {
        "run": {"input": str(REPO / "examples" / "quickstart.jsonl"), "output_dir": str(out)},
        "servers": servers(engine, "tiny", args.max_tokens),
        "telemetry": {"preset": "off", "exporter": "none"},
    }
    with rollgym_serve(job, out / "servers") as urls:
        collector = Collector(
            urls,
            agent="solver",
            model_servers={"policy": urls["policy"]},
            capture_tokens=True,
            max_staleness=1,
            concurrency=args.tasks_per_step * args.generations,
            timeout_s=300,
        )
        rollouts = RollgymRollouts(
            collector,
            output_dir=out,
            weights_dir=out / "weights",
            probe_token_ids=PROBE_IDS,
            probe_bound=PROBE_BOUND,
            ahead=itertools.cycle(rows),
        )
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=[reward_ids(*args.reward_ids)],
            args=config(args, out / "trainer"),
            train_dataset=Dataset.from_list(prompts_of(rows)),
            rollout_func=rollouts,
            callbacks=[rollouts.callback()],
        )
        with rollouts:
            started = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - started
    gaps = [g.max_abs_diff for g in rollouts.probe_gaps]
    lags = [
        batch.step - min(calls)
        for batch in rollouts.batches
        for calls in batch.policy_versions
        if calls
    ]
    return {
        "seconds": seconds,
        "steps_per_minute": args.steps / seconds * 60,
        "reward": curve(trainer),
        "probe_max_abs_diff": max((g for g in gaps if g is not None), default=None),
        "probes_checked": len(gaps),
        "stale_rows": sum(b.failures for b in rollouts.batches),
        "sample_lag": {str(k): lags.count(k) for k in sorted(set(lags))},
    }


def trl_arm(args: argparse.Namespace, model: Path, out: Path) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOTrainer
    from trl_grpo import reward_ids

    prompts = [
        {"prompt": [{"role": "user", "content": f"Compute: {row.get('question', row)}"}]}
        for row in solver_rows()
    ]
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=[reward_ids(*args.reward_ids)],
        args=config(args, out / "trainer"),
        train_dataset=Dataset.from_list(prompts),
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "steps_per_minute": args.steps / seconds * 60,
        "reward": curve(trainer),
    }


def report(args: argparse.Namespace, found: dict[str, Any]) -> None:
    ours, theirs = found["rollgym"], found["trl"]
    print(
        f"closed loop, {args.steps} steps of {args.tasks_per_step} groups x {args.generations} "
        f"generations x {args.max_tokens} tokens, reward: share of ids in "
        f"[{args.reward_ids[0]}, {args.reward_ids[1]})"
    )
    print(f"{'arm':<44}{'s':>8}{'steps/min':>11}{'reward first 5':>16}{'last 5':>8}")
    for name, arm in (
        ("rollgym async (vLLM, max_staleness 1)", ours),
        ("TRL's own generation (transformers)", theirs),
    ):
        head, tail = arm["reward"][:5], arm["reward"][-5:]
        print(
            f"{name:<44}{arm['seconds']:>8.1f}{arm['steps_per_minute']:>11.1f}"
            f"{sum(head) / len(head):>16.3f}{sum(tail) / len(tail):>8.3f}"
        )
    print(f"ratio rollgym / TRL steps per minute: {found['ratio']:.2f} (fastest run of each; "
          f"all runs' seconds: rollgym {_seconds(ours)}, TRL {_seconds(theirs)}; "
          f"load average after: {found['load_average'][0]:.1f})")  # fmt: skip
    print(
        f"rollgym: {ours['probes_checked']} probes, largest gap {ours['probe_max_abs_diff']} "
        f"(bound {PROBE_BOUND}); sample lag (versions behind the step): {ours['sample_lag']}; "
        f"rows dropped (failed or stale): {ours['stale_rows']}"
    )
    print("step  rollgym  TRL")
    for step, (a, b) in enumerate(zip(ours["reward"], theirs["reward"], strict=False)):
        print(f"{step:>4}  {a:>7.3f}  {b:>5.3f}")


def _seconds(arm: dict[str, Any]) -> str:
    return "/".join(f"{s:.1f}" for s in arm["all_seconds"])


def plot(source: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = json.loads(source.read_text())
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.plot(found["rollgym"]["reward"], label="rollgym async rollouts (vLLM, weights synced)")
    ax.plot(found["trl"]["reward"], label="TRL's own generation", linestyle="--")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("mean reward")
    low, high = found["args"]["reward_ids"]
    ax.set_title(f"GRPO on a tiny Llama: reward = share of ids in [{low}, {high})")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)


def main(argv: list[str]) -> int:
    if argv[:1] == ["plot"]:
        if len(argv) != 3:
            sys.exit("usage: closed_loop.py plot RESULTS.json OUT.png")
        plot(Path(argv[1]), Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument(
        "--reward-ids",
        type=lambda text: tuple(int(i) for i in text.split(":")),
        default=(30, 100),
        help="LOW:HIGH, the ids rewarded (the tiny tokenizer's 30..99 hold no digit: the "
        "arithmetic environment still grades each answer)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--arms", default="rollgym,trl", help="which arms to run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each arm, alternated")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    arms = set(args.arms.split(","))
    found: dict[str, Any] = {"args": vars(args) | {"json": str(args.json)}}
    runs: dict[str, list[dict[str, Any]]] = {"trl": [], "rollgym": []}
    with tempfile.TemporaryDirectory(prefix="closed-loop-") as tmp:
        folder = Path(tmp)
        model = tiny_model(folder / "model")
        for repeat in range(args.repeats):  # alternated: the machine's load hits both alike
            if "trl" in arms:
                runs["trl"].append(trl_arm(args, model, folder / f"trl-{repeat}"))
            if "rollgym" in arms:  # vLLM runs only while its arm does
                with vllm(model, folder / f"vllm-{repeat}.log") as engine:
                    arm = rollgym_arm(args, model, engine, folder / f"rollgym-{repeat}")
                runs["rollgym"].append(arm)
    for name, done in runs.items():
        if done:  # the fastest run of each arm (least disturbed), every run's seconds beside it
            found[name] = {
                **min(done, key=lambda arm: arm["seconds"]),
                "all_seconds": [arm["seconds"] for arm in done],
            }
    found["load_average"] = os.getloadavg()
    if {"rollgym", "trl"} <= set(found):
        found["ratio"] = found["rollgym"]["steps_per_minute"] / found["trl"]["steps_per_minute"]
        report(args, found)
    else:
        print(json.dumps(found, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
