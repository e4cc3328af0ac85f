"""Per-rollout ``usage`` from real servers on loopback: the engine's seconds (the simulated
engine's own, carried in ``Server-Timing``) and the sandbox's, in rollouts.jsonl, the
library's results, the Parquet export and summary.json's per-dispatch sums; the same with
tracing on and off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import REPO, pythonpath
from telemetry_helpers import launched_servers, quick_rows

from rollgym import Collector, RolloutResult
from rollgym.sandbox import unavailable_reason
from server_specs import quickstart_servers, simulated_model

pytestmark = pytest.mark.e2e


def _run(config: Path, out: Path, rows: list[dict[str, Any]], *overrides: str) -> list[dict]:
    """``rollgym run`` of ``config`` on ``rows``; its rollouts.jsonl lines."""
    (out.parent / f"{out.name}.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]
    done = subprocess.run(
        [sys.executable, "-m", "rollgym", "run", str(config)]
        + [f"run.input={out.parent / f'{out.name}.jsonl'}", f"run.output_dir={out}"]
        + ["run.repeats=1", "run.trajectories=true", *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines()]


def _summed_per_dispatch_name(out: Path, rows: list[dict[str, Any]]) -> None:
    """summary.json's usage per dispatch name is the sum of that name's rollouts.jsonl rows."""
    summary = orjson.loads((out / "summary.json").read_bytes())
    for name, table in summary["by_dispatch_name"].items():
        mine = [r["usage"] for r in rows if r["dispatch_name"] == name]
        for key in ("input_tokens", "output_tokens", "model_calls"):
            assert table["usage"][key] == sum(u[key] for u in mine), (name, key)
        for key in ("model_s", "engine_s", "sandbox_s"):
            expected = sum(u.get(key, 0.0) for u in mine)
            assert table["usage"].get(key, 0.0) == pytest.approx(expected, abs=1e-4), (name, key)


def _exported_parquet(out: Path) -> list[dict[str, Any]]:
    """``rollgym export <out> --format parquet`` (skips without pyarrow): its rows."""
    pq = pytest.importorskip("pyarrow.parquet")
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    done = subprocess.run(
        [sys.executable, "-m", "rollgym", "export", str(out), "--format", "parquet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = pq.read_table(out / "trajectories.parquet").to_pylist()
    return rows


def _parquet_columns(out: Path, rows: list[dict[str, Any]]) -> None:
    """The export carries engine_s and sandbox_s, each row's as its rollouts.jsonl line says."""
    table = _exported_parquet(out)
    assert len(table) == len(rows)
    by_id = {r["rollout_id"]: r["usage"] for r in rows}
    for row in table:
        usage = by_id[row["rollout_id"]]
        assert row["engine_s"] == pytest.approx(usage["engine_s"])
        assert row["sandbox_s"] == (
            pytest.approx(usage["sandbox_s"]) if "sandbox_s" in usage else None
        )


def test_quickstart_usage_has_engine_seconds_with_tracing_on_and_off(tmp_path: Path) -> None:
    config = REPO / "examples" / "quickstart.yaml"
    rows = quick_rows(6, 6, 4)
    traced = _run(config, tmp_path / "traced", rows)
    untraced = _run(
        config, tmp_path / "untraced", rows, "telemetry.preset=off", "telemetry.exporter=none"
    )
    assert (tmp_path / "traced" / "traces.db").exists()
    assert not (tmp_path / "untraced" / "traces.db").exists()  # tracing really was off
    assert len(traced) == len(untraced) == len(rows)
    for out, records in ((tmp_path / "traced", traced), (tmp_path / "untraced", untraced)):
        for record in records:
            usage = record["usage"]
            assert usage["model_calls"] >= 1
            # the engine's own time: positive, and within what the caller waited on the model
            assert 0 < usage["engine_s"] <= usage["model_s"] + 1e-3, record["rollout_id"]
            assert "sandbox_s" not in usage  # no sandbox in the quickstart
            assert "rollgym_usage" not in record["result"]
        _summed_per_dispatch_name(out, records)
        _parquet_columns(out, records)
    # Tracing decides nothing: the same rollouts, the same tokens, the same usage keys.
    on = {r["rollout_id"]: r["usage"] for r in traced}
    off = {r["rollout_id"]: r["usage"] for r in untraced}
    assert on.keys() == off.keys()
    for rollout_id, usage in on.items():
        assert usage.keys() == off[rollout_id].keys()
        for key in ("input_tokens", "output_tokens", "model_calls"):
            assert usage[key] == off[rollout_id][key], (rollout_id, key)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
def test_sandbox_seconds_of_code_and_terminal_rollouts(tmp_path: Path) -> None:
    source = (REPO / "examples" / "code.jsonl").read_bytes().splitlines()
    parsed = [orjson.loads(line) for line in source if line.strip()]
    rows = [r for r in parsed if r["agent"] == "coder"][:3]
    rows += [r for r in parsed if r["agent"] == "sheller"][:3]
    out = tmp_path / "code"
    records = _run(REPO / "examples" / "code.yaml", out, rows, "run.concurrency=6")
    assert len(records) == len(rows)
    for record in records:
        usage = record["usage"]
        # every rollout's verify runs a command in a sandbox (hidden tests, the check command)
        assert usage["sandbox_s"] > 0, record["rollout_id"]
        assert usage["engine_s"] > 0
    _summed_per_dispatch_name(out, records)
    _parquet_columns(out, records)


async def test_the_library_results_carry_engine_seconds(tmp_path: Path) -> None:
    """The Collector's results (no CLI, no files, tracing off) hold the same usage."""
    servers = quickstart_servers(model=simulated_model(0.01, accuracy=0.8))
    async with (
        launched_servers(servers, tmp_path, traces_to=None) as urls,
        Collector(
            {name: urls[name] for name in ("solver", "walker", "arith", "keys")},
            agent="solver",
            agents=("solver", "walker"),
            environment_routes={"keychain_episodes": "keys"},
            model_servers={"policy": urls["policy"]},
            timeout_s=60,
        ) as collector,
    ):
        results = [o async for o in collector.stream(quick_rows(2, 2, 2))]
    assert len(results) == 6
    for result in results:
        assert isinstance(result, RolloutResult) and result.usage is not None
        calls = result.usage["model_calls"]
        # fixed 10 ms per generation: the engine's own seconds, never less than its sleeps
        assert result.usage["engine_s"] >= 0.01 * calls * 0.9, result.rollout_id
        assert result.to_record()["usage"]["engine_s"] == result.usage["engine_s"]


def test_sdk_rollouts_count_their_model_seconds_and_record_every_call(tmp_path: Path) -> None:
    """Agents written with the OpenAI SDK, through the ``openai`` proxy: a plain async chat
    call, a streamed multi-turn loop, a blocking streamed Responses call. Each rollout's
    ``model_s`` is the seconds its calls took (streams until their last byte), summed in
    summary.json and exported to Parquet; each call is a turn with its request id."""
    config = tmp_path / "sdk.yaml"
    out = tmp_path / "out"
    agent = {"kind": "agent", "model": "policy", "environment": "arith"}
    servers = {
        "engine": {"kind": "model", "impl": "simulated", "accuracy": 1.0},
        "policy": {"kind": "model", "impl": "openai", "upstream": "engine", "model_name": "m"},
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "plain": {**agent, "impl": "telemetry_agents:SdkAgent"},
        "streamed": {**agent, "impl": "sdk_agents:StreamingToolAgent"},
        "responses": {**agent, "impl": "sdk_agents:BlockingResponsesAgent"},
    }
    config.write_text(orjson.dumps({"servers": servers, "run": {"agent": "plain"}}).decode())
    rows = [
        {"question": f"{i} + 4", "agent": name}
        for i in range(3)
        for name in ("plain", "streamed", "responses")
    ]
    records = _run(config, out, rows, "telemetry.preset=off", "telemetry.exporter=none")
    assert len(records) == len(rows) and all(r["reward"] == 1.0 for r in records)
    for record in records:
        usage = record["usage"]
        assert usage["model_calls"] == 1 and usage["output_tokens"] > 0
        assert usage["model_s"] > 0, record
    _summed_per_dispatch_name(out, records)
    trajectories = [
        orjson.loads(line) for line in (out / "trajectories.jsonl").read_bytes().splitlines()
    ]
    for line in trajectories:
        (turn,) = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        assert turn["request_id"] == line["rollout_id"] + ".0"
        assert turn["finish_reason"] == "stop" and "incomplete" not in turn
        assert turn["usage"]["completion_tokens"] > 0 and turn["response_id"]
    table = _exported_parquet(out)
    by_id = {r["rollout_id"]: r["usage"]["model_s"] for r in records}
    for row in table:
        assert row["model_s"] == pytest.approx(by_id[row["rollout_id"]]) and row["model_s"] > 0
