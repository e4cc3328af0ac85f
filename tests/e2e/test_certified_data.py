"""``rollgym traces check --data`` and ``rollgym export --certified-only`` on a real run.

One run of the real CLI (the simulated engine, which exports vLLM's ``llm_request`` span per
call, token capture on, a policy version file) gives the files; each test damages a copy the
way a capture bug would (a count off by one, a prompt that does not extend, a missing
log-probability, finish reason or policy version, a dropped choice, a cut answer) and asserts
that exactly that rollout, turn and rule are named. The clean run certifies with 0 violations.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import Job
from telemetry_helpers import TracedJob

from server_specs import simulated_model, walker_servers

pytestmark = pytest.mark.e2e

VERSION = 7


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run: keychain walks and episodes, tokens captured, traced, under version 7."""
    job = TracedJob(tmp_path_factory.mktemp("certified"))
    version_file = job.root / "policy_version"
    job.root.mkdir(parents=True, exist_ok=True)
    version_file.write_text(f"{VERSION}\n")
    rows: list[Any] = [{"seed": seed, "hops": 1 + seed % 3} for seed in range(6)]
    rows += [{"task_id": {"taskset": "chains", "task_id": 0}, "seed": 50, "hops": 2}]
    job.write(
        walker_servers(model=simulated_model(accuracy=0.7)),
        rows,
        agent="walker",
        repeats=2,
        capture_tokens=True,
        environment_routes={"chains": "keys"},
        policy_version_file=str(version_file),
    )
    done = job.run(timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return job.out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollgym", *args], capture_output=True, text=True, timeout=120
    )


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    raw = (run_dir / "trajectories.jsonl").read_bytes()
    return [orjson.loads(line) for line in raw.splitlines()]


def _model_turns(line: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in line["trajectory"]["turns"] if t["type"] == "model"]


def _copy(clean_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(clean_run, copy, ignore=shutil.ignore_patterns("run.lock", "*.parquet"))
    return copy


def _multi_turn(run_dir: Path, skip: int = 0) -> str:
    """A rollout with at least three model calls (the ``skip``-th such)."""
    found = [line["rollout_id"] for line in _lines(run_dir) if len(_model_turns(line)) >= 3]
    return found[skip]


def _damage(run_dir: Path, rollout_id: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Rewrite ``rollout_id``'s trajectory with ``change`` applied to its model turns."""
    _rewrite(run_dir, rollout_id, lambda line: change(_model_turns(line)))


def _rewrite(run_dir: Path, rollout_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``rollout_id``'s line of trajectories.jsonl with ``change`` applied, and move
    every rollout line's pointer to where its trajectory line now is."""
    lines = _lines(run_dir)
    for line in lines:
        if line["rollout_id"] == rollout_id:
            change(line)
    pointers: dict[str, dict[str, Any]] = {}
    data = b""
    for line in lines:
        encoded = orjson.dumps(line) + b"\n"
        pointers[line["rollout_id"]] = {
            "file": "trajectories.jsonl",
            "offset": len(data),
            "bytes": len(encoded),
        }
        data += encoded
    (run_dir / "trajectories.jsonl").write_bytes(data)
    rollouts = [orjson.loads(r) for r in (run_dir / "rollouts.jsonl").read_bytes().splitlines()]
    for rollout in rollouts:
        rollout["trajectory"] = pointers[rollout["rollout_id"]]
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rollouts))


def _check(run_dir: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    plain = _cli("traces", "check", "--data", str(run_dir))
    as_json = _cli("traces", "check", "--data", "--json", str(run_dir))
    assert as_json.returncode == plain.returncode, as_json.stderr
    return plain, orjson.loads(as_json.stdout)


def test_the_clean_run_is_certified(clean_run: Path, tmp_path: Path) -> None:
    plain, report = _check(clean_run)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert report["ok"] is True and report["violations"] == []
    assert report["rollouts"] == 14 and report["model_calls"] >= 30
    # held against the engine's own spans, one per call, and the versions the run used
    assert f"{report['model_calls']} engine spans" in report["engine_record"]
    assert report["policy_versions"].startswith("required on every call: run.policy_version_file")
    assert "0 violations: 14 rollouts certified" in plain.stdout
    # without the store (telemetry off), the answered usage is the engine's record
    copy = _copy(clean_run, tmp_path)
    (copy / "traces.db").unlink()
    plain, report = _check(copy)
    assert plain.returncode == 0 and "no trace store" in report["engine_record"]


def _off_by_one(turns: list[dict[str, Any]]) -> None:
    turns[1]["usage"]["completion_tokens"] += 1


def _not_extending(turns: list[dict[str, Any]]) -> None:
    """Turn 1 stored whole, with a token of the earlier context changed (the drift a
    re-tokenized history shows), its length and counts unchanged."""
    first, second = turns[0], turns[1]
    whole = first["prompt_ids"] + first["completion_ids"] + second["prompt_ids"]
    whole[5] += 1
    second.update(prompt_ids=whole, prompt_start=0, extends_previous=False, mismatch_at=5)


def _missing_logprob(turns: list[dict[str, Any]]) -> None:
    turns[1]["logprobs"].pop()


def _no_finish_reason(turns: list[dict[str, Any]]) -> None:
    turns[1]["finish_reason"] = None


def _no_policy_version(turns: list[dict[str, Any]]) -> None:
    assert turns[1].pop("policy_version") == VERSION


def _dropped_choice(turns: list[dict[str, Any]]) -> None:
    turns[1]["n"] = 2  # the engine answered two choices; none of the others is on the turn


def _incomplete(turns: list[dict[str, Any]]) -> None:
    turns[1]["incomplete"] = "the stream ended without a finish reason"


def _stream_incomplete(turns: list[dict[str, Any]]) -> None:
    turns[1].update(streamed=True, stream_incomplete=True)


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (_off_by_one, "token_counts"),
        (_not_extending, "prompt_extends"),
        (_missing_logprob, "logprobs_cover"),
        (_no_finish_reason, "finish_reason"),
        (_no_policy_version, "policy_version"),
        (_dropped_choice, "dropped_choice"),
        (_incomplete, "incomplete"),
        (_stream_incomplete, "incomplete"),
    ],
)
def test_each_seeded_fault_is_named_by_rollout_turn_and_rule(
    clean_run: Path, tmp_path: Path, change: Callable[[list[dict[str, Any]]], None], rule: str
) -> None:
    run_dir = _copy(clean_run, tmp_path)
    rollout_id = _multi_turn(run_dir)
    _damage(run_dir, rollout_id, change)
    plain, report = _check(run_dir)
    assert plain.returncode == 1, plain.stdout + plain.stderr
    found = {(v["rollout_id"], v["turn"], v["rule"]) for v in report["violations"]}
    assert found == {(rollout_id, 1, rule)}, report["violations"]
    assert report["uncertified_rollouts"] == 1 and report["rollouts"] == 14
    assert f"{rollout_id} turn 1: {rule}: " in plain.stdout
    count = report["violation_counts"][rule]
    assert f"{count} violations in 1 of 14 rollouts" in plain.stdout
    assert f": {rule} {count}" in plain.stdout


def test_an_engine_span_that_disagrees_is_caught(clean_run: Path, tmp_path: Path) -> None:
    """The engine's own record differs from what the trajectory and the answer say: the span
    of the rollout's second call counted one prompt token more."""
    run_dir = _copy(clean_run, tmp_path)
    rollout_id = _multi_turn(run_dir)
    with sqlite3.connect(run_dir / "traces.db") as conn:
        changed = conn.execute(
            "UPDATE spans SET attributes = json_set(attributes, '$.\"gen_ai.usage.prompt_tokens\"', "
            "json_extract(attributes, '$.\"gen_ai.usage.prompt_tokens\"') + 1) "
            "WHERE name = 'llm_request' AND json_extract(attributes, '$.\"gen_ai.request.id\"') = ?",
            (f"chatcmpl-{rollout_id}.1",),
        ).rowcount
    assert changed == 1
    plain, report = _check(run_dir)
    assert plain.returncode == 1
    (violation,) = report["violations"]
    assert (violation["rollout_id"], violation["turn"], violation["rule"]) == (
        rollout_id,
        1,
        "token_counts",
    )
    assert "in the engine's span" in violation["message"]


def test_a_missing_engine_span_is_caught(clean_run: Path, tmp_path: Path) -> None:
    run_dir = _copy(clean_run, tmp_path)
    rollout_id = _multi_turn(run_dir)
    with sqlite3.connect(run_dir / "traces.db") as conn:
        conn.execute(
            "DELETE FROM spans WHERE name = 'llm_request' "
            "AND json_extract(attributes, '$.\"gen_ai.request.id\"') = ?",
            (f"chatcmpl-{rollout_id}.2",),
        )
    plain, report = _check(run_dir)
    assert plain.returncode == 1
    found = [(v["rollout_id"], v["turn"], v["rule"]) for v in report["violations"]]
    assert found == [(rollout_id, 2, "token_counts")]
    assert f"no engine span for request {rollout_id}.2" in plain.stdout


def test_export_certified_only_leaves_out_the_damaged_rollouts(
    clean_run: Path, tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    run_dir = _copy(clean_run, tmp_path)
    damaged = {_multi_turn(run_dir, 0), _multi_turn(run_dir, 1)}
    for rollout_id, change in zip(
        sorted(damaged), (_missing_logprob, _no_finish_reason), strict=True
    ):
        _damage(run_dir, rollout_id, change)
    out = tmp_path / "certified.parquet"
    done = _cli("export", str(run_dir), "--certified-only", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote 12 rows to {out}" in done.stdout
    assert "left out 2 rollouts with violations" in done.stdout
    kept = set(pq.read_table(out).column("rollout_id").to_pylist())
    assert len(kept) == 12 and not kept & damaged
    # without the option, every rollout is exported
    everything = _cli("export", str(run_dir), "-o", str(tmp_path / "all.parquet"))
    assert everything.returncode == 0 and "wrote 14 rows" in everything.stdout


def test_a_failed_export_leaves_no_file(clean_run: Path, tmp_path: Path) -> None:
    """A value the table refuses (a reward that is not a number) fails the export with one
    line naming the rollout, and no table (not even an empty one) is left behind."""
    pytest.importorskip("pyarrow")
    run_dir = _copy(clean_run, tmp_path)
    victim = _lines(run_dir)[-1]["rollout_id"]  # in the last row group: rows went before it
    _rewrite(run_dir, victim, lambda line: line.update(reward="high"))
    done = _cli("export", str(run_dir))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"rollgym export: rollout {victim}: ")
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in run_dir.iterdir() if "parquet" in p.name) == []
    # nor when there is nothing to export (the writer was open before the lines were read)
    (run_dir / "trajectories.jsonl").unlink()
    done = _cli("export", str(run_dir))
    assert done.returncode == 2 and "run.capture_tokens=true" in done.stderr
    assert sorted(p.name for p in run_dir.iterdir() if "parquet" in p.name) == []


def test_check_data_says_what_is_missing(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.out.mkdir(parents=True)
    done = _cli("traces", "check", "--data", str(job.out))
    assert done.returncode == 2
    assert done.stderr.strip().endswith("run.capture_tokens=true")
    assert "Traceback" not in done.stderr
