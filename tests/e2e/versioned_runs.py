"""Five runs made with the real CLI over policy versions, as a training loop's evaluations are.

Run ``i`` evaluates training step ``100 * i`` (``run.step``): the trainer's version file says
``2 * i`` and the simulated model moves its weights on by itself every few requests
(``bump_every``), so each run's rollouts span a few policy versions and some multi-turn
rollouts finish behind the current version (a policy lag). The model gets better with the
step (``servers.policy.accuracy``), and the fourth run bounds staleness (``run.max_staleness:
0``): those are the config differences the comparisons must name. The tool-loop agent walks
the keychain environment; the simulated model decides right or wrong from the rollout id, so
each run is the same every time it is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e_support import Job

from server_specs import simulated_model, walker_servers

RUNS = 5
STEP = 100
ROWS: list[dict[str, Any]] = [{"seed": seed, "hops": 1 + seed % 3} for seed in range(8)]
REPEATS = 2


def accuracy(index: int) -> float:
    """Run ``index``'s model accuracy: better with each step."""
    return round(0.3 + 0.15 * index, 2)


def versioned_run(root: Path, index: int, **run: Any) -> Path:
    """Make run ``index`` in ``root`` with the real CLI; its output folder."""
    root.mkdir(parents=True, exist_ok=True)
    # one input and one version file for all five, as one trainer's evaluations share them
    version_file = root.parent / "policy_version"
    version_file.write_text(f"{2 * index}\n")
    rows = root.parent / "rows.jsonl"
    servers = walker_servers(
        model=simulated_model(0.002, accuracy=accuracy(index), bump_every=5), episodes=False
    )
    if index == 3:
        run = {"max_staleness": 0, **run}
    job = Job(root)
    job.input = rows
    job.write(
        servers,
        ROWS,
        agent="walker",
        repeats=REPEATS,
        concurrency=4,
        max_attempts=2,
        step=STEP * index,
        policy_version_file=str(version_file),
        **run,
    )
    done = job.run(timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return job.out


def versioned_runs(root: Path, **run: Any) -> list[Path]:
    """The five runs, each in its own folder under ``root`` (step order)."""
    return [versioned_run(root / f"step-{STEP * i}", i, **run) for i in range(RUNS)]
