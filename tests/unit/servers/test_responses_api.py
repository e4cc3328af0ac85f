"""The OpenAI Responses API: translations both ways, every model server answering it, the proxy."""

from __future__ import annotations

import orjson
import pytest
from fastapi import FastAPI, Request
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.errors import HTTPError
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server
from rollgym.servers.responses_api import parse_request, to_chat_request, to_response
from rollgym.telemetry import names

FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0.0}}
KEY = "sk-test-abcdefghijklmnop"
READ_KEY = {
    "type": "function",
    "name": "read_key",
    "description": "Read one key of the vault.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
}
ARITH = "Compute: 12 + 7 * 3\nReply with 'Answer: <number>'."


def chat_of(body: dict) -> dict:
    return to_chat_request(parse_request(body))


def field_of(body: dict) -> str | None:
    with pytest.raises(HTTPError) as caught:
        parse_request(body)
    assert caught.value.status == 400
    return caught.value.field


# --- translation: Responses -> chat ------------------------------------------------------------


def test_string_input_with_instructions_and_sampling():
    chat = chat_of(
        {
            "model": "m",
            "input": "hello",
            "instructions": "Be brief.",
            "max_output_tokens": 7,
            "temperature": 0.2,
            "store": False,  # accepted and not translated
        }
    )
    assert chat == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
        ],
        "max_tokens": 7,
        "temperature": 0.2,
    }


def test_message_list_with_text_parts():
    chat = chat_of(
        {
            "input": [
                {"role": "developer", "content": "Rules."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "first"},
                        {"type": "input_text", "text": "second"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "one part"}]},
            ]
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "one part"},
    ]


def test_tools_and_tool_choice_become_chat_tools():
    chat = chat_of(
        {
            "input": "go",
            "tools": [READ_KEY],
            "tool_choice": {"type": "function", "name": "read_key"},
            "parallel_tool_calls": False,
        }
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_key",
                "description": "Read one key of the vault.",
                "parameters": READ_KEY["parameters"],
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "read_key"}}
    assert chat["parallel_tool_calls"] is False
    assert chat_of({"input": "go", "tool_choice": "required"})["tool_choice"] == "required"


def test_function_call_round_trip():
    """A chat tool call -> a function_call output item -> sent back -> the same chat turn."""
    request = parse_request({"input": "Start key: k-1", "tools": [READ_KEY]})
    call = {
        "id": "call-7",
        "type": "function",
        "function": {"name": "read_key", "arguments": '{"key":"k-1"}'},
    }
    answer = {
        "id": "chatcmpl-7-0.0",
        "created": 123,
        "model": "sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Reading.", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    response = to_response(answer, request, None)
    assert response["id"] == "resp_7-0.0"  # from the chat id when no request id was given
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["created_at"] == 123 and response["model"] == "sim"
    message, function_call = response["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "Reading.", "annotations": []}]
    assert function_call == {
        "type": "function_call",
        "id": "fc_call-7",
        "call_id": "call-7",
        "name": "read_key",
        "arguments": '{"key":"k-1"}',
        "status": "completed",
    }
    assert response["usage"]["input_tokens"] == 3
    assert response["usage"]["output_tokens"] == 4 and response["usage"]["total_tokens"] == 7

    history = [
        {"role": "user", "content": "Start key: k-1"},
        *response["output"],
        {"type": "function_call_output", "call_id": "call-7", "output": "secret: S-1"},
    ]
    chat = chat_of({"input": history, "tools": [READ_KEY]})
    assert chat["messages"] == [
        {"role": "user", "content": "Start key: k-1"},
        {"role": "assistant", "content": "Reading.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call-7", "content": "secret: S-1"},
    ]
    # Parallel calls with no text before them share one assistant message.
    parallel = chat_of(
        {
            "input": [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
            ]
        }
    )
    assert parallel["messages"][1]["content"] is None
    assert [c["id"] for c in parallel["messages"][1]["tool_calls"]] == ["a", "b"]


def test_response_ids_and_truncation():
    request = parse_request({"input": "x", "max_output_tokens": 1})
    answer = {
        "id": "chatcmpl-whatever",
        "choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": "length"}],
    }
    response = to_response(answer, request, "4-2.3")
    assert response["id"] == "resp_4-2.3"
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["max_output_tokens"] == 1
    assert response["usage"]["total_tokens"] == 0


def test_bad_requests_name_the_field():
    assert (
        field_of({"input": [{"role": "user", "content": "a"}, {"type": "function_call_output"}]})
        == "body.input.1.call_id"
    )
    assert field_of({"input": [{"type": "reasoning"}]}) == "body.input.0.type"
    assert field_of({"input": ["text"]}) == "body.input.0"
    assert field_of({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}) == (
        "body.input.0.content.0.text"
    )
    assert field_of({"input": [{"role": "robot", "content": "x"}]}) == "body.input.0.role"
    assert field_of({"input": 5}) == "body.input"
    assert field_of({"input": []}) == "body.input"
    assert field_of({}) == "body.input"
    assert field_of({"input": "x", "tools": [{"type": "web_search"}]}) == "body.tools.0.type"
    assert field_of({"input": "x", "previous_response_id": "resp_1"}) == (
        "body.previous_response_id"
    )
    assert field_of({"input": "x", "max_output_tokens": 0}) == "body.max_output_tokens"


# --- every model server answers /v1/responses ------------------------------------------------


async def test_simulated_model_plays_keychain_and_arithmetic(serving, client):
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        first = await client.post_json(
            "policy",
            url + "/r/4-0/v1/responses",
            {"model": "x", "input": "Start key: k-00ab\nFind the secret.", "tools": [READ_KEY]},
            headers={"X-Request-Id": "4-0.0"},
        )
        assert first.status == 200, first.data
        history = [
            {"role": "user", "content": "Start key: k-00ab\nFind the secret."},
            *first.data["output"],
            {
                "type": "function_call_output",
                "call_id": first.data["output"][0]["call_id"],
                "output": "secret: S-abcdef123456",
            },
        ]
        second = await client.post_json(
            "policy",
            url + "/r/4-0/v1/responses",
            {"input": history, "tools": [READ_KEY]},
            headers={"X-Request-Id": "4-0.1"},
        )
        arith = await client.post_json(
            "policy",
            url + "/v1/responses",
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": ARITH}]}]},
            headers={"X-Request-Id": "5-0.0"},
        )
        no_id = await client.post_json(
            "policy", url + "/v1/responses", {"input": ARITH, "instructions": "Be exact."}
        )
    (call,) = first.data["output"]
    assert first.data["id"] == "resp_4-0.0"
    assert call["type"] == "function_call" and call["name"] == "read_key"
    assert orjson.loads(call["arguments"]) == {"key": "k-00ab"}
    assert second.data["id"] == "resp_4-0.1"
    assert second.data["output"][0]["content"][0]["text"] == "Answer: S-abcdef123456"
    assert arith.data["id"] == "resp_5-0.0" and arith.data["status"] == "completed"
    (message,) = arith.data["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "Answer: 33", "annotations": []}]
    usage = arith.data["usage"]
    # the toy tokenizer's counts: the templated prompt, and "Answer", ":", " 33", <|im_end|>
    assert usage["input_tokens"] == 25 and usage["output_tokens"] == 4
    assert usage["total_tokens"] == 29
    assert no_id.data["id"].startswith("resp_") and len(no_id.data["id"]) > len("resp_")
    assert no_id.data["output"][0]["content"][0]["text"] == "Answer: 33"


async def test_answers_match_the_openai_sdk_types(serving, client):
    """The answer parses as the official SDK's ``Response`` (when the SDK is installed)."""
    types = pytest.importorskip("openai.types.responses")
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        tool = await client.post_json(
            "policy", url + "/v1/responses", {"input": "Start key: k-1", "tools": [READ_KEY]}
        )
        text = await client.post_json("policy", url + "/v1/responses", {"input": ARITH})
    for answer in (tool, text):
        parsed = types.Response.model_validate(answer.data)
        assert parsed.status == "completed" and parsed.usage is not None
    assert types.Response.model_validate(text.data).output_text == "Answer: 33"


async def test_refusals_name_the_field(serving, client):
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        bad_item = await client.post_json(
            "policy",
            url + "/r/1-0/v1/responses",
            {"input": [{"role": "user", "content": "x"}, {"type": "function_call", "name": "f"}]},
        )
        not_object = await client.post_json("policy", url + "/v1/responses", [1, 2])
    # OpenAI's error shape: the field is the error's "param"
    assert bad_item.status == 400 and bad_item.data["error"]["param"] == "body.input.1.call_id"
    assert "body.input.1.call_id" in bad_item.data["error"]["message"]
    assert not_object.status == 400 and not_object.data["error"]["param"] == "body"


async def test_engine_span_names_the_rollout_from_path_or_request_id(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        await client.post_json(
            "policy", url + "/r/9-0/v1/responses", {"input": ARITH}, headers={"X-Request-Id": "x"}
        )
        await client.post_json(
            "policy", url + "/v1/responses", {"input": ARITH}, headers={"X-Request-Id": "8-1.2"}
        )
    spans = exporter.get_finished_spans()
    engine = [s for s in spans if s.name == names.SPAN_ENGINE_REQUEST]
    assert sorted(s.attributes[names.ROLLOUT_ID] for s in engine) == ["8-1", "9-0"]
    scoped = next(s for s in spans if s.name == "POST /r/{rollout_id}/v1/responses")
    scoped_engine = next(s for s in engine if s.attributes[names.ROLLOUT_ID] == "9-0")
    assert scoped_engine.parent.span_id == scoped.context.span_id


# --- the openai proxy forwards /v1/responses as-is --------------------------------------------


class RecordingUpstream(Server):
    """An upstream speaking the Responses API that reports what reached it."""

    kind = "model"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/v1/responses")
        async def responses(request: Request) -> OrjsonResponse:
            body = await request.json()
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {KEY}":
                message = f"Incorrect API key provided: {auth}"
                return OrjsonResponse({"error": {"message": message}}, status_code=401)
            return OrjsonResponse(
                {
                    "id": "resp_upstream",
                    "object": "response",
                    "received": body,
                    "request_id": request.headers.get("x-request-id"),
                    "traceparent": request.headers.get("traceparent"),
                }
            )


def proxy_of(upstream_url: str) -> Server:
    options = {
        "base_url": upstream_url + "/v1",
        "model_name": "served",
        "api_key_env": "UPSTREAM_KEY",
    }
    return OpenAIUpstream.build("proxy", options)


async def test_proxy_answers_what_a_simulated_upstream_answers(serving, client, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", KEY)
    async with (
        serving(SimulatedModel.build("engine", FAST)) as upstream_url,
        serving(proxy_of(upstream_url)) as url,
    ):
        answer = await client.post_json(
            "proxy",
            url + "/r/3-0/v1/responses",
            {"model": "ignored", "input": ARITH},
            headers={"X-Request-Id": "3-0.1"},
        )
    assert answer.status == 200, answer.data
    assert answer.data["id"] == "resp_3-0.1"  # the upstream saw our request id
    assert answer.data["output"][0]["content"][0]["text"] == "Answer: 33"


async def test_proxy_forwards_the_body_as_is_with_trace_context(serving, client, monkeypatch):
    from rollgym.telemetry.setup import install_for_tests

    monkeypatch.setenv("UPSTREAM_KEY", KEY)
    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    body = {
        "model": "ignored",
        "input": [{"type": "reasoning", "id": "rs_1", "summary": []}],  # not ours to judge
        "reasoning": {"effort": "low"},
    }
    async with (
        serving(RecordingUpstream.build("engine", {})) as upstream_url,
        serving(proxy_of(upstream_url)) as url,
    ):
        answer = await client.post_json(
            "proxy", url + "/v1/responses", body, headers={"X-Request-Id": "2-0.4"}
        )
    assert answer.status == 200, answer.data
    # the id goes in the header and, for vLLM (which reads it only there), in the body
    assert answer.data["received"] == {**body, "model": "served", "request_id": "resp_2-0.4"}
    assert answer.data["request_id"] == "2-0.4"
    client_span = next(s for s in exporter.get_finished_spans() if s.name == "POST /v1/responses")
    trace_id = format(client_span.context.trace_id, "032x")
    assert answer.data["traceparent"].split("-")[1] == trace_id


async def test_proxy_never_shows_the_key(serving, client, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "sk-other-key-zyxwvutsrq")  # the upstream refuses it
    async with (
        serving(RecordingUpstream.build("engine", {})) as upstream_url,
        serving(proxy_of(upstream_url)) as url,
    ):
        answer = await client.post_json("proxy", url + "/v1/responses", {"input": "hi"})
    assert answer.status == 401
    assert "authentication" in answer.data["error"]["message"]
    assert "sk-other-key-zyxwvutsrq" not in answer.text
    assert "<redacted>" in answer.data["error"]["message"]
