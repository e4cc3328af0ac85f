"""A run made with the real CLI for the insight tests: the keychain walk on the simulated
model with ``run.capture_tokens`` and traces on, so every model turn holds the engine's token
ids and log-probabilities (the toy tokenizer's), and the spans of every rollout are stored.
"""

from __future__ import annotations

from pathlib import Path

from e2e_support import Job

from server_specs import quickstart_servers, walker_servers

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


def failure_run(root: Path) -> Path:
    """A run with trajectories where an agent author's own code fails after one model call
    (``parser``: :mod:`failing_user_agent`), one agent fails before any (``broken``), and the
    single-turn ``solver`` succeeds; traces on. Rollout ``0-0`` is the parser's, ``1-0`` the
    broken one's, ``2-0`` the solver's."""
    servers = quickstart_servers(
        walker=None,
        keys=None,
        parser={"kind": "agent", "impl": "failing_user_agent:ParsingAgent", "model": "policy"},
        broken={"kind": "agent", "impl": "agents:AlwaysFailAgent"},
    )
    job = Job(root)
    job.write(
        servers,
        [
            {"agent": "parser", "question": "2 + 2"},
            {"agent": "broken", "question": "1 + 1"},
            {"question": "3 + 4"},
        ],
        agent="solver",
        trajectories=True,
        max_attempts=1,
        telemetry={"preset": "default"},
    )
    done = job.run(timeout=300, telemetry=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return job.out


def parse_line() -> int:
    """The line of :func:`failing_user_agent.parse_answer` that raises."""
    source = (Path(__file__).parent / "failing_user_agent.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if "# PARSE LINE" in line)
