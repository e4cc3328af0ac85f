"""Attribute keys and span names as a backend expects them, checked against the
``opentelemetry-semantic-conventions`` package rather than against our own constants."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import url_attributes as url_incubating
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)
from opentelemetry.trace import SpanKind

import rollgym
from rollgym.telemetry import names, spans
from rollgym.telemetry.context import current_carrier


def test_http_client_span_carries_the_template_it_is_named_after(named):
    url = "http://127.0.0.1:8001/r/3-0/v1/chat/completions"
    route = "/r/{rollout_id}/v1/chat/completions"
    with spans.http_client_span("POST", "policy", url, route):
        pass
    (span,) = named(f"POST {route}")
    assert span.kind is SpanKind.CLIENT
    assert span.attributes[url_incubating.URL_TEMPLATE] == route
    assert span.attributes[url_attributes.URL_FULL] == url
    assert span.attributes[http_attributes.HTTP_REQUEST_METHOD] == "POST"
    assert span.attributes[server_attributes.SERVER_ADDRESS] == "127.0.0.1"
    assert span.attributes[server_attributes.SERVER_PORT] == 8001


def test_http_client_span_without_a_template_has_none(named):
    with spans.http_client_span("GET", "policy", "http://127.0.0.1:8001/health", None):
        pass
    (span,) = named("GET")
    assert url_incubating.URL_TEMPLATE not in span.attributes


def test_http_server_span_carries_the_scheme(named):
    with spans.http_server_span("POST", "/run", {}, "https"):
        pass
    (span,) = named("POST")
    assert span.attributes[url_attributes.URL_SCHEME] == "https"
    assert span.attributes[url_attributes.URL_PATH] == "/run"


def test_model_spans_follow_the_genai_conventions(named):
    with spans.model_chat_span("3-0", "qwen", "openai") as span:
        spans.record_model_response(span, {"id": "chatcmpl-3-0.0", "model": "qwen-2025"})
    (chat,) = named(names.SPAN_MODEL_CHAT)  # the contract's name on the agent's side
    assert chat.kind is SpanKind.CLIENT
    assert (
        chat.attributes[gen_ai.GEN_AI_OPERATION_NAME] == gen_ai.GenAiOperationNameValues.CHAT.value
    )
    assert chat.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "openai"
    assert chat.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "qwen"
    assert chat.attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == "qwen-2025"
    assert chat.attributes[gen_ai.GEN_AI_RESPONSE_ID] == "chatcmpl-3-0.0"


def test_the_model_servers_span_is_named_operation_and_model(named):
    with spans.genai_span("3-0", "qwen", "vllm", upstream=True):
        pass
    with spans.genai_span(None, "sim", "rollgym", upstream=False):
        pass
    (remote,) = named("chat qwen")
    (local,) = named("chat sim")
    assert remote.kind is SpanKind.CLIENT and local.kind is SpanKind.INTERNAL
    assert remote.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert remote.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "vllm"
    assert remote.attributes[names.ROLLOUT_ID] == "3-0"
    assert names.ROLLOUT_ID not in local.attributes


def test_error_type_and_status_keys_are_the_stable_ones():
    assert names.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert names.HTTP_RESPONSE_STATUS_CODE == http_attributes.HTTP_RESPONSE_STATUS_CODE
    assert names.HTTP_ROUTE == http_attributes.HTTP_ROUTE


def test_spans_name_rollgym_and_its_version_as_their_scope(named):
    with spans.rollout_span("3-0"):
        carrier = current_carrier()
    assert carrier
    (span,) = named(names.SPAN_ROLLOUT)
    assert span.instrumentation_scope is not None
    assert (span.instrumentation_scope.name, span.instrumentation_scope.version) == (
        "rollgym",
        rollgym.__version__,
    )
