"""A real run (the real CLI, its servers on loopback) exported over OTLP to the backends people
run for agents, and read back through each one's own API: every rollout is an agent there.

Phoenix (the ``phoenix`` extra) derives its span kinds from ``gen_ai.operation.name`` and its
sessions from ``gen_ai.conversation.id``; MLflow (in a venv of its own, installed by
``scripts/test.sh``) its span types, token usage and trace sessions from the same keys. Checked
in each: the rollout an agent span, its tool calls tool spans, its model calls LLM spans with
token counts, the reward visible, and the span tree as rollgym made it (and in MLflow, which
keeps span links, each rollout's link to the job).
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from telemetry_helpers import TracedJob, quick_rows, quickstart_job

from backends import mlflow_traces
from rollgym.telemetry import names
from waits import settled

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
#: The run: 2 single-turn arithmetic rollouts (``solver``), 2 keychain walks (``walker``) and
#: 1 keychain episode the environment plays itself (``keys``).
ROWS = (2, 2, 1)
AGENTS = {"solver", "walker", "keys"}


def _run(root: Path, endpoint: str, headers: str | None = None) -> TracedJob:
    """The real CLI, its spans sent over OTLP/HTTP to ``endpoint`` (no local store)."""
    job = quickstart_job(root, quick_rows(*ROWS))
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        # content capture on: tool spans carry their arguments and result
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    if headers:
        env["OTEL_EXPORTER_OTLP_HEADERS"] = headers
    proc = job.run(env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(job.rollouts) == sum(ROWS) and not job.failures
    return job


def _assert_tool_content(attributes: dict[str, Any]) -> None:
    """A tool span as the backend keeps it: the arguments the model wrote (a JSON object) and
    the environment's answer. MLflow hands back a JSON attribute value decoded, Phoenix as
    the text that was sent."""
    arguments = attributes[names.GEN_AI_TOOL_CALL_ARGUMENTS]
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    assert isinstance(arguments, dict) and arguments
    assert isinstance(attributes[names.GEN_AI_TOOL_CALL_RESULT], str)
    assert attributes[names.GEN_AI_TOOL_CALL_RESULT]


def _assert_messages(attributes: dict[str, Any]) -> None:
    """A model call as the backend keeps it with content capture on: the messages sent (a user
    message among them) and the answer, in the GenAI conventions' shape."""
    sent, answered = (
        value if not isinstance(value, str) else json.loads(value)
        for value in (
            attributes[names.GEN_AI_INPUT_MESSAGES],
            attributes[names.GEN_AI_OUTPUT_MESSAGES],
        )
    )
    assert any(m["role"] == "user" and m["parts"] for m in sent), sent
    assert answered and answered[0]["role"] == "assistant" and answered[0]["finish_reason"]


# --- Phoenix --------------------------------------------------------------------------------
def _phoenix_spans(base: str) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    cursor = ""
    while True:
        url = f"{base}/v1/projects/default/spans?limit=1000{cursor}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            page = json.load(answer)
        spans += page["data"]
        if not page.get("next_cursor"):
            return spans
        cursor = f"&cursor={page['next_cursor']}"


@pytest.mark.phoenix
def test_a_run_in_phoenix_is_agents_with_tools_llm_calls_and_rewards(
    phoenix: str, tmp_path: Path
) -> None:
    # the endpoint as Phoenix documents it, its trace path included: taken as the base URL
    job = _run(tmp_path / "run", phoenix + "/v1/traces")
    rewards = {r["rollout_id"]: r["reward"] for r in job.rollouts}

    def ready(spans: list[dict[str, Any]]) -> bool:
        verified = [s for s in spans if s["name"] == names.SPAN_VERIFY]
        return len(verified) == len(rewards) and any(s["name"] == names.SPAN_JOB for s in spans)

    spans = settled(lambda: _phoenix_spans(phoenix), 2.0, 90, ready, interval=1.0)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)

    # the rollout: an AGENT span, one per rollout, its session the rollout
    rollouts = {s["attributes"][names.ROLLOUT_ID]: s for s in by_name[names.SPAN_ROLLOUT]}
    assert set(rollouts) == set(rewards)
    for rollout_id, span in rollouts.items():
        assert span["span_kind"] == "AGENT", span
        assert span["attributes"][names.GEN_AI_AGENT_NAME] in AGENTS
        assert span["attributes"]["session.id"] == rollout_id  # Phoenix's sessions view
    assert {s["attributes"][names.GEN_AI_AGENT_NAME] for s in rollouts.values()} == AGENTS

    # its tool calls: TOOL spans, named, with the model's call id
    tools = by_name[names.SPAN_ENV_TOOL]
    assert tools and all(s["span_kind"] == "TOOL" for s in tools)
    for span in tools:
        assert span["attributes"]["tool.name"] == span["attributes"][names.ENV_TOOL_NAME]
        assert span["attributes"]["tool.id"].startswith("call-")
        _assert_tool_content(span["attributes"])

    # its model calls: LLM spans with token counts, in the rollout's session
    chats = by_name[names.SPAN_MODEL_CHAT]
    assert {s["attributes"][names.ROLLOUT_ID] for s in chats} == set(rewards)
    for span in chats:
        attributes = span["attributes"]
        assert span["span_kind"] == "LLM", span
        assert attributes["llm.token_count.prompt"] > 0
        assert attributes["llm.token_count.completion"] > 0
        assert attributes["llm.token_count.total"] == (
            attributes["llm.token_count.prompt"] + attributes["llm.token_count.completion"]
        )
        assert attributes["llm.model_name"]
        _assert_messages(attributes)
        assert attributes["session.id"] == attributes[names.ROLLOUT_ID]

    # the reward: on the verify span as attributes and as the evaluation event
    for span in by_name[names.SPAN_VERIFY]:
        reward = rewards[span["attributes"][names.ROLLOUT_ID]]
        assert span["attributes"][names.GEN_AI_EVALUATION_SCORE_VALUE] == reward
        assert span["attributes"][names.GEN_AI_EVALUATION_NAME] == "reward"
        (event,) = [e for e in span["events"] if e["name"] == "gen_ai.evaluation.result"]
        assert event["attributes"][names.GEN_AI_EVALUATION_SCORE_VALUE] == reward
    for span in by_name[names.SPAN_DISPATCH]:
        assert (
            span["attributes"][names.ROLLOUT_REWARD]
            == rewards[span["attributes"][names.ROLLOUT_ID]]
        )

    # the tree as rollgym made it: every parent arrived in the same trace; each rollout's
    # trace has its dispatch span as the one root, the job its own trace
    by_id = {s["context"]["span_id"]: s for s in spans}
    for span in spans:
        if span["parent_id"]:
            parent = by_id[span["parent_id"]]
            assert parent["context"]["trace_id"] == span["context"]["trace_id"]
    roots = Counter(s["context"]["trace_id"] for s in spans if not s["parent_id"])
    dispatches = by_name[names.SPAN_DISPATCH]
    assert {s["attributes"][names.ROLLOUT_ID] for s in dispatches} == set(rewards)
    for span in dispatches:
        assert not span["parent_id"] and roots[span["context"]["trace_id"]] == 1
        assert (
            rollouts[span["attributes"][names.ROLLOUT_ID]]["context"]["trace_id"]
            == (span["context"]["trace_id"])
        )
    (job_span,) = by_name[names.SPAN_JOB]
    assert job_span["context"]["trace_id"] not in {s["context"]["trace_id"] for s in dispatches}
    # Phoenix keeps no span links: the dispatch -> job link is not there to check
    assert all("links" not in s for s in dispatches)


# --- MLflow ---------------------------------------------------------------------------------
def test_a_run_in_mlflow_is_agents_with_tools_llm_calls_and_rewards(
    mlflow: str, tmp_path: Path
) -> None:
    # MLflow files OTLP traces under the experiment its header names (0: the default one)
    job = _run(tmp_path / "run", mlflow, headers="x-mlflow-experiment-id=0")
    rewards = {r["rollout_id"]: r["reward"] for r in job.rollouts}

    def ready(traces: list[dict[str, Any]]) -> bool:
        verified = [s for t in traces for s in t["spans"] if s["name"] == names.SPAN_VERIFY]
        return len(verified) == len(rewards)

    traces = settled(lambda: mlflow_traces(mlflow), 2.0, 90, ready, interval=1.0)
    rollout_traces = {
        s["attributes"][names.ROLLOUT_ID]: t
        for t in traces
        for s in t["spans"]
        if s["name"] == names.SPAN_DISPATCH
    }
    assert set(rollout_traces) == set(rewards)
    # the job its own trace; MLflow keeps span links: each rollout's root links to it
    (job_trace,) = [t for t in traces if any(s["name"] == names.SPAN_JOB for s in t["spans"])]
    (job_span,) = [s for s in job_trace["spans"] if s["name"] == names.SPAN_JOB]
    for trace in rollout_traces.values():
        (root,) = [s for s in trace["spans"] if s["name"] == names.SPAN_DISPATCH]
        assert root["links"] == [
            {"trace_id": job_trace["trace_id"], "span_id": job_span["span_id"]}
        ]
    for rollout_id, trace in rollout_traces.items():
        spans = trace["spans"]
        by_name: dict[str, list[dict[str, Any]]] = {}
        for span in spans:
            by_name.setdefault(span["name"], []).append(span)
        # the tree: one root, the dispatch span; every parent in the trace
        ids = {s["span_id"] for s in spans}
        (root,) = [s for s in spans if s["parent_id"] is None]
        assert root["name"] == names.SPAN_DISPATCH
        assert all(s["parent_id"] in ids for s in spans if s is not root)
        # the rollout an AGENT, the trace's session the rollout
        (rollout,) = by_name[names.SPAN_ROLLOUT]
        assert rollout["span_type"] == "AGENT"
        assert rollout["attributes"][names.GEN_AI_AGENT_NAME] in AGENTS
        assert trace["session"] == rollout_id
        # the model calls chat models with token usage, summed on the trace
        chats = by_name[names.SPAN_MODEL_CHAT]
        assert chats and all(s["span_type"] == "CHAT_MODEL" for s in chats)
        for span in chats:
            usage = span["attributes"]["mlflow.chat.tokenUsage"]
            assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
            _assert_messages(span["attributes"])
        assert trace["token_usage"]["input_tokens"] >= sum(
            s["attributes"]["mlflow.chat.tokenUsage"]["input_tokens"] for s in chats
        )
        # tool calls (the keychain's) TOOL spans
        for span in by_name.get(names.SPAN_ENV_TOOL, []):
            assert span["span_type"] == "TOOL"
            assert span["attributes"][names.GEN_AI_TOOL_CALL_ID].startswith("call-")
            _assert_tool_content(span["attributes"])
        # the reward on the verify span and its evaluation event
        (verify,) = by_name[names.SPAN_VERIFY]
        assert verify["attributes"][names.GEN_AI_EVALUATION_SCORE_VALUE] == rewards[rollout_id]
        (event,) = [e for e in verify["events"] if e["name"] == "gen_ai.evaluation.result"]
        assert event["attributes"][names.GEN_AI_EVALUATION_SCORE_VALUE] == rewards[rollout_id]
    walks = [
        t
        for t in rollout_traces.values()
        if any(s["name"] == names.SPAN_ENV_TOOL for s in t["spans"])
    ]
    assert len(walks) == ROWS[1] + ROWS[2]  # the walks and the episode called tools
