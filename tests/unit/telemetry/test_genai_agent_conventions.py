"""The GenAI agent conventions on rollgym's span helpers (TELEMETRY.md, "Rollouts as agents"):
each attribute on the in-memory SDK path, and the same spans through rollgym's own recording
pipeline to the OTLP bytes it sends, so nothing is lost where records are packed."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import INVALID_SPAN

from rollgym.telemetry import names, spans
from rollgym.telemetry._state import state
from rollgym.telemetry.pipeline import records as R
from rollgym.telemetry.pipeline.frames import pack_batch, unpack_frame
from rollgym.telemetry.pipeline.recording import RecordingTracerProvider
from rollgym.telemetry.pipeline.wire import encode_request

#: What each span of one rollout carries besides its ``gym.*`` attributes.
EXPECTED = {
    names.SPAN_ROLLOUT: {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "walker",
        "gen_ai.conversation.id": "3-0",
    },
    names.SPAN_MODEL_CHAT: {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "policy",
        "gen_ai.provider.name": "openai",
        "gen_ai.conversation.id": "3-0",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    },
    names.SPAN_ENV_TOOL: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read_key",
        "gen_ai.tool.call.id": "call-3-0.0",
    },
    names.SPAN_VERIFY: {
        "gen_ai.evaluation.name": "reward",
        "gen_ai.evaluation.score.value": 0.5,
    },
}
ANSWER = {
    "id": "chatcmpl-3-0.0",
    "choices": [{"finish_reason": "tool_calls", "message": {}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 5},
}


def _one_rollout() -> None:
    with spans.rollout_span("3-0", "walker"):
        with spans.model_chat_span("3-0", "policy", "openai") as chat:
            spans.record_model_response(chat, ANSWER)
        with spans.env_tool_span("3-0", "read_key", "call-3-0.0"):
            pass
        with spans.verify_span("3-0") as verify:
            spans.record_evaluation(verify, 0.5)


def test_each_span_of_a_rollout_carries_its_genai_attributes(named):
    _one_rollout()
    for name, expected in EXPECTED.items():
        (span,) = named(name)
        got = {key: span.attributes.get(key) for key in expected}
        assert got == expected, name
        assert span.attributes[names.ROLLOUT_ID] == "3-0"
    (verify,) = named(names.SPAN_VERIFY)
    (event,) = verify.events
    assert event.name == "gen_ai.evaluation.result"
    assert dict(event.attributes) == EXPECTED[names.SPAN_VERIFY]


def test_without_an_id_or_a_name_nothing_is_made_up(named):
    with spans.rollout_span(None), spans.env_tool_span(None, "read_key"):
        pass
    (rollout,) = named(names.SPAN_ROLLOUT)
    assert rollout.attributes == {"gen_ai.operation.name": "invoke_agent"}
    (tool,) = named(names.SPAN_ENV_TOOL)
    assert "gen_ai.tool.call.id" not in tool.attributes
    assert tool.attributes["gen_ai.tool.name"] == "read_key"


def test_the_model_servers_own_span_is_in_the_rollouts_conversation(named):
    with spans.genai_span("3-0", "policy", "openai", upstream=True):
        pass
    (span,) = named("chat policy")
    assert span.attributes["gen_ai.conversation.id"] == "3-0"


@pytest.mark.parametrize("reward", [float("nan"), "x", None])
def test_recording_an_evaluation_never_raises(named, reward):
    spans.record_evaluation(INVALID_SPAN, 1.0)  # not recording: nothing, no error
    with spans.verify_span("1-0") as span:
        spans.record_evaluation(span, reward)  # type: ignore[arg-type]


def test_the_recording_pipeline_sends_every_genai_attribute_and_the_event(monkeypatch):
    """rollgym's own provider (the one a run uses), records packed as a span ends and encoded
    as OTLP as the exporter child does: every ``gen_ai.*`` attribute and the event arrive."""
    records: list[R.SpanRecord] = []
    provider = RecordingTracerProvider(records.append)
    monkeypatch.setattr(state, "tracer", provider.get_tracer("rollgym"))
    _one_rollout()
    frame = unpack_frame(pack_batch(records))
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode_request({"service.name": "t"}, frame))
    sent = {s.name: s for s in request.resource_spans[0].scope_spans[0].spans}

    def plain(value):  # an OTLP AnyValue as the Python value it was
        which = value.WhichOneof("value")
        if which == "array_value":
            return tuple(plain(v) for v in value.array_value.values)
        return getattr(value, which)

    for name, expected in EXPECTED.items():
        attributes = {kv.key: plain(kv.value) for kv in sent[name].attributes}
        assert {key: attributes.get(key) for key in expected} == expected, name
    (event,) = sent[names.SPAN_VERIFY].events
    assert event.name == "gen_ai.evaluation.result"
    assert {kv.key: plain(kv.value) for kv in event.attributes} == EXPECTED[names.SPAN_VERIFY]


def test_the_keys_are_the_semantic_conventions_own():
    """Our constants against the ``opentelemetry-semantic-conventions`` package: a rename
    upstream shows here, to be followed in ``names.py`` alone."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

    operations = gen_ai.GenAiOperationNameValues
    assert operations.INVOKE_AGENT.value == names.GEN_AI_OPERATION_INVOKE_AGENT
    assert operations.EXECUTE_TOOL.value == names.GEN_AI_OPERATION_EXECUTE_TOOL
    assert operations.CHAT.value == names.GEN_AI_OPERATION_CHAT
    for ours, theirs in (
        (names.GEN_AI_AGENT_NAME, gen_ai.GEN_AI_AGENT_NAME),
        (names.GEN_AI_CONVERSATION_ID, gen_ai.GEN_AI_CONVERSATION_ID),
        (names.GEN_AI_TOOL_NAME, gen_ai.GEN_AI_TOOL_NAME),
        (names.GEN_AI_TOOL_CALL_ID, gen_ai.GEN_AI_TOOL_CALL_ID),
        (names.GEN_AI_TOOL_CALL_ARGUMENTS, gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS),
        (names.GEN_AI_TOOL_CALL_RESULT, gen_ai.GEN_AI_TOOL_CALL_RESULT),
        (names.GEN_AI_INPUT_MESSAGES, gen_ai.GEN_AI_INPUT_MESSAGES),
        (names.GEN_AI_OUTPUT_MESSAGES, gen_ai.GEN_AI_OUTPUT_MESSAGES),
        (names.GEN_AI_EVALUATION_NAME, gen_ai.GEN_AI_EVALUATION_NAME),
        (names.GEN_AI_EVALUATION_SCORE_VALUE, gen_ai.GEN_AI_EVALUATION_SCORE_VALUE),
    ):
        assert ours == theirs
