"""Environments from elsewhere played by a real engine, through ``rollgym run``.

llama.cpp's server (llama-cpp-python) on loopback, serving the tiny random model of
``tiny_gguf.py`` (nothing downloaded) with function calling on (``chatml-function-calling``:
under ``tool_choice: auto`` a grammar makes it choose a tool or a message, and a tool's
arguments are generated against the tool's JSON schema) and log-probabilities available. It
plays, each through rollgym's model server:

- a real OpenEnv environment (``openenv_guess.py``, written with openenv-core) on its own
  server, by the built-in ``tool_loop`` agent and by the environment's own episode ``/run``;
- a real verifiers ``vf.ToolEnv`` (``verifiers_envs/verifiers_capitals.py``), which runs its
  own rollout loop against rollgym's model server;
- a NeMo Gym resource server written with nemo-gym (``nemo_gym_notebook.py``) on its own
  server, by the ``tool_loop`` agent;
- an ORS environment written with openreward (``ors_envs/ors_guess.py``) on openreward's own
  server, by the ``tool_loop`` agent and by the environment's own episodes.

The model writes nonsense, so what is checked is what must hold whatever it writes: every
rollout completes (a bad tool call is a mistake told to the model, not a failed rollout); the
engine's own log-probabilities are on the token-captured trajectory; the trace holds the
foreign environment's steps under its own names and ``rollgym traces check`` exits 0; every
session the rollouts opened on the environment's side is closed at the end (counted from the
environment's server).

llama-cpp-python builds from source (scripts/test.sh); without it, or without an
environment's package, that test is skipped, saying so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from engine_support import llama_server
from telemetry_helpers import TracedJob
from tiny_gguf import write_tiny_llama

from rollgym.telemetry import names

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e

#: ``auto``: llama.cpp's function calling only offers the tools when a choice is named; it
#: then picks a tool or a message by grammar and writes the arguments to the tool's schema.
SAMPLING = {"max_tokens": 24, "tool_choice": "auto", "temperature": 1.0}
#: One tool forced: llama.cpp writes its arguments by grammar but stops at ``max_tokens``, so
#: a long string argument is cut off: arguments that are not JSON.
FORCED = {
    "max_tokens": 12,
    "tool_choice": {"type": "function", "function": {"name": "lookup_capital"}},
    "temperature": 1.0,
}
ROWS = 6
MCP_ROWS = 2


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server on 127.0.0.1, function calling and
    log-probabilities on."""
    folder = tmp_path_factory.mktemp("engine_foreign")
    model = write_tiny_llama(folder / "tiny.gguf")
    options = ("--chat_format", "chatml-function-calling", "--logits_all", "true")
    # the tiny vocabulary spells most text byte by byte: the tools' prompt alone is ~1,100
    # tokens, so the context is wider than the suite's usual 512
    options += ("--n_ctx", "4096")
    with llama_server(folder, model, *options) as url:
        yield url


def model_servers(engine: str) -> dict[str, Any]:
    return {
        "engine": {"kind": "model", "url": engine},
        "policy": {"kind": "model", "impl": "openai", "upstream": "engine", "model_name": "tiny"},
    }


def player(environment: str) -> dict[str, Any]:
    """The built-in ``tool_loop`` agent on ``environment``, a few turns at most."""
    return {
        "kind": "agent",
        "impl": "tool_loop",
        "model": "policy",
        "environment": environment,
        "max_turns": 3,
        "sampling": SAMPLING,
    }


def run_job(job: TracedJob, servers: dict[str, Any], rows: list[Any], **run: Any) -> None:
    job.write(
        servers,
        rows,
        concurrency=4,
        timeout_s=120,
        max_attempts=1,
        trajectories=True,
        capture_tokens=True,
        **run,
    )
    proc = job.run(timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def assert_all_completed(job: TracedJob, n: int) -> None:
    """Every rollout completed: whatever the model wrote, nothing failed the rollout."""
    summary = job.summary
    assert summary["requested"] == summary["completed"] == n, job.failures[:3]
    assert summary["failed"] == 0 and job.failures == [], job.failures[:3]


def model_turns(job: TracedJob) -> list[dict[str, Any]]:
    """The model turns of every trajectory (each must be there: one line per rollout)."""
    lines = job.records("trajectories.jsonl")
    assert {line["rollout_id"] for line in lines} == {r["rollout_id"] for r in job.rollouts}
    turns = []
    for line in lines:
        assert line["trajectory"]["capture"] == "tokens"
        turns += [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
    return turns


def assert_engine_record(turns: list[dict[str, Any]], *, worded: bool) -> None:
    """What the engine answered is what each turn holds: its own usage, and its own
    log-probabilities, one per completion token, where it gave them. llama.cpp gives no token
    ids at all, and no log-probabilities for a tool call (its grammar writes those): the turn
    says so. ``worded``: some turns were answered in text, and those carry them."""
    assert turns
    for turn in turns:
        assert turn["tokens_missing"] is True and "completion_ids" in turn["missing"], turn
        completion = turn["usage"]["completion_tokens"]
        assert completion >= 1, turn
        if turn.get("logprobs"):
            # one per token it sampled (it may count a few more where a character spans
            # byte tokens)
            assert 1 <= len(turn["logprobs"]) <= completion, turn
            assert all(isinstance(v, float) and v <= 0.0 for v in turn["logprobs"])
        else:
            assert "logprobs" in turn["missing"], turn
            assert turn["finish_reason"] == "tool_calls", turn
    if worded:
        assert any(t.get("logprobs") for t in turns), "no turn kept the engine's logprobs"


def assert_traced(job: TracedJob, tool_names: set[str]) -> None:
    """The environment's steps as ``gym.env.tool`` spans named by the environment's own tools
    (a mistaken call is marked, not an error); the trace store checks."""
    spans = job.spans()
    ids = {r["rollout_id"] for r in job.rollouts}
    for name in (names.SPAN_ENV_SEED, names.SPAN_VERIFY):
        assert {s.rollout_id for s in spans.named(name)} == ids, name
    tools = spans.named(names.SPAN_ENV_TOOL)
    assert {s.attributes[names.ENV_TOOL_NAME] for s in tools} <= tool_names
    assert all(names.ERROR_TYPE not in s.attributes for s in tools)
    check = job.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr


def assert_data_check_names_the_gaps(job: TracedJob) -> None:
    """``rollgym traces check --data`` does not certify what llama.cpp did not give: each model
    turn without the engine's log-probabilities is one ``logprobs_cover`` violation."""
    check = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "check", "--data", "--json", str(job.out)],
        env=job.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = orjson.loads(check.stdout)
    assert {v["rule"] for v in report["violations"]} <= {"logprobs_cover"}, report["violations"]
    flagged = {(v["rollout_id"], v["turn"]) for v in report["violations"]}
    bare = {
        (line["rollout_id"], turn["call"])
        for line in job.records("trajectories.jsonl")
        for turn in line["trajectory"]["turns"]
        if turn["type"] == "model" and not turn.get("logprobs")
    }
    assert bare <= flagged, (bare, flagged)
    assert check.returncode == (1 if flagged else 0), check.stderr


def tool_turns(job: TracedJob) -> list[dict[str, Any]]:
    return [
        turn
        for line in job.records("trajectories.jsonl")
        for turn in line["trajectory"]["turns"]
        if turn["type"] == "tool"
    ]


# --- OpenEnv -------------------------------------------------------------------------------------


def test_a_real_engine_plays_an_openenv_environment(engine: str, tmp_path: Path) -> None:
    pytest.importorskip(
        "openenv.core", reason="openenv-core is not installed: pip install 'rollgym[openenv]'"
    )
    from openenv_support import open_sessions, openenv_server, session_counts

    job = TracedJob(tmp_path)
    with openenv_server(tmp_path / "openenv.log") as url:
        servers = {
            **model_servers(engine),
            "guess": {
                "kind": "environment",
                "impl": "openenv",
                "model": "policy",
                "openenv_url": url,
                "sampling": SAMPLING,
                "max_turns": 3,
            },
            "player": player("guess"),
            # an MCP environment served by rollgym: its own tools, hint() and guess(number)
            "tools": {
                "kind": "environment",
                "impl": "openenv",
                "model": "policy",
                "openenv_app": "openenv_tools:app",
            },
            "prober": player("tools"),
        }
        half = ROWS // 2
        rows = [{"seed": i} for i in range(half)] + [
            {"task_id": {"taskset": "guesses", "task_id": str(i)}, "seed": i} for i in range(half)
        ]
        rows += [{"seed": i, "agent": "prober"} for i in range(MCP_ROWS)]
        run_job(job, servers, rows, agent="player", environment_routes={"guesses": "guess"})
        counts = session_counts(url)
        assert counts["opened"] == ROWS and open_sessions(url) == 0, counts
    assert_all_completed(job, ROWS + MCP_ROWS)
    assert {r["dispatch_name"] for r in job.rollouts} == {"player", "guess", "prober"}
    for record in job.rollouts:
        details = record["result"]["details"]
        # the reward is the observations' own: 1.0 only for a right guess
        assert record["reward"] in (0.0, 1.0) and details["steps"] <= 3, details
    assert_engine_record(model_turns(job), worded=False)
    tools = tool_turns(job)
    assert tools, "the model made no tool call"
    for turn in tools:
        assert turn["name"] in ("GuessAction", "hint", "guess"), turn
        if "error" in turn:  # a mistake (out of range, not a number ...) told to the model
            assert turn["output"].startswith("error: "), turn
    assert_traced(job, {"GuessAction", "hint", "guess"})
    assert_data_check_names_the_gaps(job)


# --- verifiers -----------------------------------------------------------------------------------


def test_a_real_engine_plays_verifiers_environments(engine: str, tmp_path: Path) -> None:
    """A ``vf.SingleTurnEnv`` (text: the engine's log-probabilities kept) and a ``vf.ToolEnv``
    (its tool forced, arguments often cut off), each running its own rollout loop."""
    from verifiers_support import TracedVerifiersJob, require_verifiers, routed, verifiers_env

    require_verifiers()
    job = TracedVerifiersJob(tmp_path)
    servers = {
        **model_servers(engine),
        "sums": verifiers_env("verifiers_arith", sampling={"max_tokens": 24}),
        "capitals": verifiers_env(
            "verifiers_capitals", verifiers_args={"max_turns": 3}, sampling=FORCED
        ),
    }
    rows = routed("sums", 2) + routed("capitals", 2)
    run_job(job, servers, rows, environment_routes={"sums": "sums", "capitals": "capitals"})
    assert_all_completed(job, 4)
    for record in job.rollouts:
        # the rubric's own reward and metrics (the tiny model is rarely right)
        assert record["reward"] in (0.0, 1.0) and record["usage"]["model_calls"] >= 1
        metric = "correct" if record["dispatch_name"] == "sums" else "named_capital"
        assert metric in record["result"]["details"]["metrics"], record["result"]
    assert_engine_record(model_turns(job), worded=True)
    spans = job.spans()
    ids = {r["rollout_id"] for r in job.rollouts}
    assert {s.rollout_id for s in spans.named(names.SPAN_MODEL_CHAT)} == ids
    assert_traced(job, {"lookup_capital"})
    assert_data_check_names_the_gaps(job)
    # every tool call the model made before its last turn (verifiers stops at max_turns
    # without answering that one) is a tool turn and a span, those whose arguments verifiers
    # could not parse (it told the model so, without calling the tool) as mistakes
    answered = 0
    for line in job.records("trajectories.jsonl"):
        turns = line["trajectory"]["turns"]
        models = [t for t in turns if t["type"] == "model"]
        made = [
            c["function"]["name"] for t in models[:-1] for c in t["message"].get("tool_calls") or []
        ]
        assert [t["name"] for t in turns if t["type"] == "tool"] == made, turns
        answered += len(made)
    assert answered > 0, "the forced tool was never answered"
    assert len(spans.named(names.SPAN_ENV_TOOL)) == answered
    for turn in tool_turns(job):
        assert "error" not in turn or turn["output"].startswith("error: "), turn


# --- NeMo Gym ------------------------------------------------------------------------------------


def test_a_real_engine_plays_a_nemo_gym_resource_server(engine: str, tmp_path: Path) -> None:
    from nemo_gym_support import VENV, notebook_rows, notebook_server, session_counts

    if not any(VENV.glob("rollgym-nemogym-*.ok")):
        pytest.skip(f"nemo-gym's venv is missing ({VENV}): scripts/test.sh makes it")
    job = TracedJob(tmp_path)
    with notebook_server(tmp_path / "notebook.log") as url:
        servers = {
            **model_servers(engine),
            "nemo": {
                "kind": "environment",
                "impl": "nemo_gym",
                "model": "policy",
                "resources_url": url,
            },
            "player": player("nemo"),
        }
        run_job(job, servers, notebook_rows(4), agent="player")
        counts = session_counts(url)
    assert_all_completed(job, 4)
    assert counts["seeded"] == counts["closed"] == 4 and counts["open"] == 0, counts
    assert_engine_record(model_turns(job), worded=False)
    assert_traced(job, {"note", "reveal"})


# --- ORS (OpenReward) ----------------------------------------------------------------------------


def test_a_real_engine_plays_an_ors_environment(engine: str, tmp_path: Path) -> None:
    """An environment written with openreward, on openreward's own server, played by the
    ``tool_loop`` agent and by the environment's own episodes: its ``guess`` tool's arguments
    come from the engine's grammar (any integer, often out of the game's range)."""
    from ors_support import ors_server, require_openreward, session_counts

    require_openreward()
    job = TracedJob(tmp_path)
    with ors_server(tmp_path / "ors.log", tmp_path / "ors_sessions.txt") as url:
        servers = {
            **model_servers(engine),
            "guess": {
                "kind": "environment",
                "impl": "ors",
                "model": "policy",
                "ors_url": url,
                "sampling": SAMPLING,
            },
            "player": player("guess"),
        }
        rows = [{"index": i} for i in range(2)] + [
            {"task_id": {"taskset": "guesses", "task_id": str(i)}, "index": i} for i in range(2)
        ]
        run_job(job, servers, rows, agent="player", environment_routes={"guesses": "guess"})
    counts = session_counts(tmp_path / "ors_sessions.txt")
    assert counts["opened"] == counts["closed"] >= 4, counts
    assert_all_completed(job, 4)
    for record in job.rollouts:
        assert record["reward"] in (0.0, 1.0), record["result"]
    assert_engine_record(model_turns(job), worded=False)
    tools = tool_turns(job)
    assert tools, "the model made no tool call"
    for turn in tools:
        assert turn["name"] == "guess", turn
    assert_traced(job, {"guess"})
    assert_data_check_names_the_gaps(job)
