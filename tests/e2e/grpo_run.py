"""Runs made with the real CLI for the views' tests: a GRPO-style run (four repeats a task,
some groups all-equal) and a run whose input has one line that is not JSON.

Two single-turn agents on the arithmetic environment: ``solver`` asks a simulated model right
half the time (its groups have spread), ``easy`` one that is always right (every ``easy`` group
is zero-variance). The simulated model decides right or wrong from the rollout id, so the run is
the same every time. The e2e and browser tests read its groups back and check them against the
run's own files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from e2e_support import Job

from server_specs import quickstart_servers, simulated_model

REPEATS = 4
SOLVER_TASKS = 8
EASY_TASKS = 4


def grpo_run(root: Path) -> Path:
    """Run the job into ``root``; its output folder (trajectories kept, traces on)."""
    servers = quickstart_servers(
        model=simulated_model(accuracy=0.5),
        walker=None,
        keys=None,
        sharp=simulated_model(accuracy=1.0),
        easy={"kind": "agent", "impl": "single_turn", "model": "sharp", "environment": "arith"},
    )
    rows: list[dict[str, Any]] = [
        {"agent": "solver", "question": f"{a} + {a + 3}"} for a in range(SOLVER_TASKS)
    ] + [{"agent": "easy", "question": f"{a} * 3"} for a in range(EASY_TASKS)]
    job = Job(root)
    job.write(
        servers,
        rows,
        agent="solver",
        trajectories=True,
        repeats=REPEATS,
        telemetry={"preset": "default"},
    )
    done = job.run(timeout=300, telemetry=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return job.out


def rewards_by_task(out: Path) -> dict[int, list[float]]:
    """Each task's rewards, read straight from rollouts.jsonl (not through rollgym's code)."""
    groups: dict[int, list[float]] = {}
    for line in (out / "rollouts.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        groups.setdefault(record["task_index"], []).append(record["reward"])
    return groups


def zero_variance_tasks(out: Path) -> set[int]:
    return {task for task, rewards in rewards_by_task(out).items() if len(set(rewards)) == 1}


#: The line of :func:`bad_line_run`'s input that is not JSON (1-based), and its readable lines.
BAD_LINE = 6
GOOD_LINES = 6


def bad_line_run(root: Path) -> tuple[Path, str]:
    """Four repeats of six readable lines and one malformed line (traces on); the output
    folder and what the run printed (progress lines included: not a terminal)."""
    servers = quickstart_servers(walker=None, keys=None)
    rows: list[Any] = [{"question": f"{a} + 1"} for a in range(BAD_LINE - 1)]
    rows += ['{"question": broken', {"question": "2 + 2"}]
    job = Job(root)
    job.write(servers, rows, agent="solver", repeats=REPEATS, telemetry={"preset": "default"})
    done = job.run(timeout=300, telemetry=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return job.out, done.stdout + done.stderr
