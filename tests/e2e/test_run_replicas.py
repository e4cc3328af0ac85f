"""``servers.<name>.replicas``: the quickstart with every server replicated, locally.

Real servers on loopback, the real driver. The keychain environment is multi-turn: its
sessions live in the memory of the replica that created them, so a run where every
rollout succeeds shows session affinity holds; each replica's own ``/aggregate_metrics``
shows the sessions were spread over both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from e2e_support import pythonpath

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_quickstart_with_two_replicas_of_every_server(tmp_path: Path) -> None:
    lines = (REPO / "examples" / "quickstart.jsonl").read_text().splitlines()
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(lines[0:10] + lines[50:60]) + "\n")
    out = tmp_path / "out"
    overrides = [f"servers.{name}.replicas=2" for name in ("policy", "arith", "keys", "solver")]
    overrides += ["servers.walker.replicas=3", "servers.policy.accuracy=1.0"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollgym",
            "run",
            str(REPO / "examples" / "quickstart.yaml"),
            f"run.input={rows}",
            f"run.output_dir={out}",
            "run.concurrency=16",
            "telemetry.preset=off",
            *overrides,
        ],
        env={"PYTHONPATH": pythonpath(), "PATH": "/usr/bin:/bin", "OTEL_SDK_DISABLED": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["failed"] == 0, (out / "failures.jsonl").read_text()
    assert summary["completed"] == 20 * 3
    rewards = [orjson.loads(line)["reward"] for line in (out / "rollouts.jsonl").open("rb")]
    assert rewards == [1.0] * 60  # accuracy 1.0: a lost session would be a wrong answer
    # every replica is its own process with its own log, watched and counted
    for instance in ("policy@1", "arith@1", "keys@1", "solver@1", "walker@1", "walker@2"):
        assert (out / "logs" / f"{instance}.log").exists()
        server = summary["servers"][instance.split("@")[0]]
        assert server["replicas"][instance] == {"deaths": 0, "restarts": 0, "down": False}
    # a server's entry adds its replicas up; each replica is still listed
    assert summary["servers"]["walker"] == {
        "deaths": 0,
        "restarts": 0,
        "down": False,
        "replicas": {
            name: {"deaths": 0, "restarts": 0, "down": False}
            for name in ("walker", "walker@1", "walker@2")
        },
    }
    # both replicas of each environment served sessions (balanced, then pinned), and the
    # environment's figures are their sum
    environments = summary["environments"]
    for name in ("arith", "keys"):
        each = environments[name]["replicas"]
        seeds = [_seeds(each[name]), _seeds(each[f"{name}@1"])]
        assert all(count > 0 for count in seeds), environments
        assert sum(seeds) == _seeds(environments[name]) == 30
        assert environments[name]["count"] == each[name]["count"] + each[f"{name}@1"]["count"]
        assert environments[name]["count"] == 30
        assert environments[name]["mean_reward"] == 1.0  # accuracy 1.0 on every replica


def _seeds(aggregates: dict[str, object]) -> int:
    value = aggregates.get("seeded")
    assert isinstance(value, int), aggregates
    return value
