"""``rollgym traces profile`` on a real quickstart run: real servers on loopback, real spans."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from e2e_support import REPO, pythonpath

from rollgym.tracestore.profile_phases import PHASES


def test_profile_of_a_quickstart_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]  # the run's own local store, as a user gets it
    done = subprocess.run(
        [sys.executable, "-m", "rollgym", "run", str(REPO / "examples" / "quickstart.yaml")]
        + [f"run.output_dir={out}", "run.repeats=1", "run.concurrency=32"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shown = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "profile", str(out), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    report = orjson.loads(shown.stdout)
    phases = {p["name"]: p for p in report["phases"]}
    assert list(phases) == list(PHASES)  # every phase present, unattributed named as such
    assert abs(sum(p["share"] for p in report["phases"]) - 1.0) <= 1e-9
    rows = [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines()]
    assert report["dispatches"] == len(rows) == 110
    # The simulated engine reports vLLM's split; the client spans their connection waits.
    for name in ("engine_prefill", "engine_decode", "http", "agent", "tools", "verify"):
        assert phases[name]["share"] > 0, name
    assert phases["client_queue"]["seconds"] >= 0 and phases["sandbox"]["share"] == 0
    names = {g["dispatch_name"] for g in report["per_dispatch_name"]}
    assert names == {"solver", "walker", "keys"}
    for group in report["per_dispatch_name"]:
        assert sum(p["share"] for p in group["phases"]) == pytest.approx(1.0, abs=1e-9)
    slowest = max(rows, key=lambda r: r["duration_s"])
    top = report["stragglers"][0]
    assert top["rollout_id"] == slowest["rollout_id"]
    assert top["duration_s"] == pytest.approx(slowest["duration_s"], rel=0.05, abs=0.02)
    assert report["accounting"]["output_tokens"] > 0 and report["accounting"]["model_calls"] > 0
