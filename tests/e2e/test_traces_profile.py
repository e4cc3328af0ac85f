"""A real quickstart run (real servers on loopback, real spans): ``rollgym traces profile`` of
its store, and the per-rollout ``usage`` in rollouts.jsonl and summary.json."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from e2e_support import REPO, pythonpath

from rollgym.reading.profile_phases import PHASES


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
    # One line says where the live profile is while the run goes.
    assert sum("live profile: http://127.0.0.1:" in line for line in done.stderr.splitlines()) == 1
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
    for name in (
        "engine_prefill",
        "engine_decode",
        "http",
        "agent",
        "tools",
        "verify",
        "client_queue",
    ):
        assert phases[name]["share"] > 0, name
    assert phases["client_queue"]["seconds"] > 0 and phases["sandbox"]["share"] == 0
    names = {g["dispatch_name"] for g in report["per_dispatch_name"]}
    assert names == {"solver", "walker", "keys"}
    for group in report["per_dispatch_name"]:
        assert sum(p["share"] for p in group["phases"]) == pytest.approx(1.0, abs=1e-9)
    slowest = max(rows, key=lambda r: r["duration_s"])
    top = report["stragglers"][0]
    assert top["rollout_id"] == slowest["rollout_id"]
    assert top["duration_s"] == pytest.approx(slowest["duration_s"], rel=0.05, abs=0.02)
    accounting = report["accounting"]
    assert accounting["output_tokens"] > 0 and accounting["model_calls"] > 0
    # usage: counted by the agents at the model boundary; the profile counts the model spans.
    # Two independent sources of the same numbers (no retries here: one dispatch per row).
    assert all(r["usage"]["model_calls"] >= 1 for r in rows)
    for key in ("input_tokens", "output_tokens", "model_calls"):
        assert sum(r["usage"][key] for r in rows) == accounting[key], key
    summary = orjson.loads((out / "summary.json").read_bytes())
    for name, table in summary["by_dispatch_name"].items():
        mine = [r for r in rows if r["dispatch_name"] == name]
        assert table["usage"]["output_tokens"] == sum(r["usage"]["output_tokens"] for r in mine)
        assert table["usage"]["model_s"] == pytest.approx(
            sum(r["usage"]["model_s"] for r in mine), abs=1e-3
        )
    assert all("rollgym_usage" not in r["result"] for r in rows)
