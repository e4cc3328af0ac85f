"""Content on spans: a tool span's arguments and result, a model span's input and output
messages; only with content capture on, each text cut to its limit."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from chat_shapes import read_key_answered
from rollgym.config import TelemetryConfig
from rollgym.environment_variables import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
from rollgym.telemetry import names, spans
from rollgym.telemetry.content_capture import (
    TRUNCATED_MARK,
    capture,
    captured_text,
    configure_capture,
)
from rollgym.telemetry.settings import TelemetrySettings

ARGS = names.GEN_AI_TOOL_CALL_ARGUMENTS
RESULT = names.GEN_AI_TOOL_CALL_RESULT


@pytest.fixture(autouse=True)
def _capture_off_after() -> Iterator[None]:
    yield
    configure_capture(False)


def _tool_call(arguments: object, result: object) -> None:
    with spans.env_tool_span("3-0", "read_key", "call-1") as span:
        spans.record_tool_call(span, arguments, result)


def test_with_capture_off_a_tool_span_carries_no_content(named):
    assert capture.content is False  # the default of every process
    _tool_call({"key": "secret"}, "the door opens")
    (tool,) = named(names.SPAN_ENV_TOOL)
    assert ARGS not in tool.attributes and RESULT not in tool.attributes
    assert tool.attributes[names.GEN_AI_TOOL_NAME] == "read_key"


def test_with_capture_on_a_tool_span_carries_arguments_and_result(named):
    configure_capture(True)
    _tool_call({"key": "k1"}, "the door opens")
    _tool_call('{"key": "as the model wrote it"}', None)
    first, second = named(names.SPAN_ENV_TOOL)
    assert first.attributes[ARGS] == '{"key":"k1"}'  # an object as JSON
    assert first.attributes[RESULT] == "the door opens"
    assert second.attributes[ARGS] == '{"key": "as the model wrote it"}'  # text as it is
    assert second.attributes[RESULT] == "null"


def test_a_long_value_is_cut_at_the_limit_never_inside_a_character(named):
    configure_capture(True, max_bytes=10)
    _tool_call("é" * 20, "x" * 10)
    (tool,) = named(names.SPAN_ENV_TOOL)
    cut = str(tool.attributes[ARGS])
    assert cut == "é" * 5 + TRUNCATED_MARK  # 10 bytes: five two-byte characters
    assert tool.attributes[RESULT] == "x" * 10  # exactly at the limit: whole
    configure_capture(True, max_bytes=9)
    assert captured_text("é" * 20) == "é" * 4 + TRUNCATED_MARK


@pytest.mark.parametrize(
    ("env_value", "config_value", "expected"),
    [
        (None, False, False),
        (None, True, True),
        ("true", False, True),
        ("false", True, False),  # the standard variable wins either way
        ("", True, True),
    ],
)
def test_the_switch_resolves_the_standard_variable_over_the_config(
    env_value, config_value, expected
):
    environ = (
        {} if env_value is None else {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: env_value}
    )
    config = TelemetryConfig(capture_content=config_value, capture_max_bytes=100)
    settings = TelemetrySettings.from_config(
        config, local_store_endpoint="http://127.0.0.1:9", environ=environ
    )
    assert settings.capture_content is expected
    # launched servers get the same choice through _ROLLGYM_TELEMETRY
    again = TelemetrySettings.from_json(settings.to_json())
    assert (again.capture_content, again.capture_max_bytes) == (expected, 100)


CONVERSATION = [
    {"role": "system", "content": "Walk the chain."},
    {"role": "user", "content": "Start at k1."},
    *read_key_answered("k1", "next key: k2", "c0"),
]
ANSWER = {"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "k2"}}]}


def _chat() -> None:
    with spans.model_chat_span("3-0", "policy", "openai") as span:
        spans.record_model_response(span, ANSWER)
        spans.record_model_messages(span, CONVERSATION, ANSWER)


def test_with_capture_off_a_model_span_carries_no_messages(named):
    _chat()
    (chat,) = named(names.SPAN_MODEL_CHAT)
    assert names.GEN_AI_INPUT_MESSAGES not in chat.attributes
    assert names.GEN_AI_OUTPUT_MESSAGES not in chat.attributes


def test_with_capture_on_a_model_span_carries_its_messages_in_the_conventions_shape(named):
    configure_capture(True)
    _chat()
    (chat,) = named(names.SPAN_MODEL_CHAT)
    sent = json.loads(str(chat.attributes[names.GEN_AI_INPUT_MESSAGES]))
    assert sent == [
        {"role": "system", "parts": [{"type": "text", "content": "Walk the chain."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Start at k1."}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c0", "name": "read_key", "arguments": '{"key": "k1"}'}
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "c0", "response": "next key: k2"}],
        },
    ]
    answered = json.loads(str(chat.attributes[names.GEN_AI_OUTPUT_MESSAGES]))
    assert answered == [
        {"role": "assistant", "parts": [{"type": "text", "content": "k2"}], "finish_reason": "stop"}
    ]
    # the viewer's conversation from spans reads the texts back
    from rollgym.reading.span_messages import recorded_conversation

    entries = recorded_conversation(
        [{"start_ns": 1, "attributes": dict(chat.attributes), "events": []}]  # type: ignore[list-item]
    )
    assert [(e["role"], e["content"]) for e in entries if e["content"]] == [
        ("system", "Walk the chain."),
        ("user", "Start at k1."),
        ("assistant", "k2"),
    ]


def test_each_text_of_a_message_is_cut_and_the_json_stays_whole(named):
    configure_capture(True, max_bytes=8)
    _chat()
    (chat,) = named(names.SPAN_MODEL_CHAT)
    sent = json.loads(str(chat.attributes[names.GEN_AI_INPUT_MESSAGES]))
    assert sent[0]["parts"][0]["content"] == "Walk the" + TRUNCATED_MARK
