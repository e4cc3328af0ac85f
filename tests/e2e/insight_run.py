"""A run made with the real CLI for the insight tests: the keychain walk on the simulated
model with ``run.capture_tokens`` and traces on, so every model turn holds the engine's token
ids and log-probabilities (the toy tokenizer's), and the spans of every rollout are stored.
"""

from __future__ import annotations

from pathlib import Path

from e2e_support import Job

from server_specs import walker_servers

ROLLOUTS = 4


def tokens_run(root: Path) -> Path:
    """Run the job into ``root``; its output folder."""
    job = Job(root)
    job.write(
        walker_servers(),
        [{"seed": seed, "hops": 2} for seed in range(ROLLOUTS)],
        agent="walker",
        capture_tokens=True,
        telemetry={"preset": "default"},
    )
    done = job.run(timeout=300, telemetry=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return job.out
