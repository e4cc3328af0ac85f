"""The OpenAI-compatible upstream proxy, in front of a real (simulated) upstream server."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Request
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.responses import Response

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server
from rollgym.servers.request_ids import is_uuid, upstream_uuid
from rollgym.telemetry import names
from rollgym.telemetry.setup import install_for_tests

ARITH = [{"role": "user", "content": "Compute: 2 + 2"}]
KEY = "sk-test-abcdefghijklmnop"


class LeakyUpstream(Server):
    """An upstream that echoes what it got and refuses with the key in its message."""

    kind = "model"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> OrjsonResponse:
            auth = request.headers.get("authorization", "")
            return OrjsonResponse(
                {"error": {"message": f"Incorrect API key provided: {auth}"}}, status_code=401
            )


async def test_forwards_model_and_request_id(serving, client, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", KEY)
    upstream = SimulatedModel.build(
        "engine", {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0}}
    )
    async with serving(upstream) as upstream_url:
        proxy = OpenAIUpstream.build(
            "proxy",
            {
                "base_url": upstream_url + "/v1",
                "model_name": "served-model",
                "api_key_env": "UPSTREAM_KEY",
            },
        )
        async with serving(proxy) as url:
            answer = await client.post_json(
                "proxy",
                url + "/r/3-0/v1/chat/completions",
                {"messages": ARITH},
                headers={"X-Request-Id": "3-0.1"},
            )
    assert answer.status == 200
    assert answer.data["id"] == "chatcmpl-3-0.1"  # the upstream saw our request id
    assert answer.data["choices"][0]["message"]["content"] == "Answer: 4"


async def test_upstream_errors_never_show_the_key(serving, client, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", KEY)
    async with serving(LeakyUpstream.build("engine", {})) as upstream_url:
        proxy = OpenAIUpstream.build(
            "proxy",
            {"base_url": upstream_url + "/v1", "model_name": "m", "api_key_env": "UPSTREAM_KEY"},
        )
        async with serving(proxy) as url:
            answer = await client.post_json(
                "proxy", url + "/v1/chat/completions", {"messages": ARITH}
            )
    assert answer.status == 401
    message = answer.data["error"]["message"]  # OpenAI's error shape
    assert "authentication" in message and "UPSTREAM_KEY" in message
    assert answer.data["error"]["type"] == "authentication_error"
    assert KEY not in answer.text and KEY not in str(answer.data)
    assert "<redacted>" in message


async def test_missing_key_variable_fails_start_naming_the_variable(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    proxy = OpenAIUpstream.build(
        "proxy",
        {"base_url": "http://127.0.0.1:9/v1", "model_name": "m", "api_key_env": "NO_SUCH_KEY_VAR"},
    )
    with pytest.raises(RuntimeError, match="NO_SUCH_KEY_VAR"):
        await proxy.start()
    await proxy.stop()


async def test_unreachable_upstream_is_502(serving, client):
    proxy = OpenAIUpstream.build("proxy", {"base_url": "http://127.0.0.1:9/v1", "model_name": "m"})
    async with serving(proxy) as url:
        answer = await client.post_json("proxy", url + "/v1/chat/completions", {"messages": ARITH})
    assert answer.status == 502 and "cannot reach 'upstream'" in answer.data["error"]["message"]


#: Bodies an upstream has answered with HTTP 200 that are not a JSON object: a gateway's HTML
#: page, a cut body, and JSON holding a lone surrogate (Python's own ``json`` writes one for
#: a model's ``"\\ud800"``; no strict parser takes it).
UNREADABLE_200 = {
    "html": b"<html><body>upstream connect error</body></html>",
    "cut": b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess',
    "lone surrogate": b'{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", '
    b'"content": "4 \\ud800"}, "finish_reason": "stop"}]}',
}


class UnreadableUpstream(Server):
    """An upstream that answers HTTP 200 with the body the request's message names."""

    kind = "model"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            asked = await request.json()
            body = UNREADABLE_200[asked["messages"][0]["content"]]
            return Response(body, media_type="application/json")


@pytest.mark.parametrize("kind", sorted(UNREADABLE_200))
async def test_a_success_the_proxy_cannot_read_is_a_502_saying_so(serving, client, kind):
    async with serving(UnreadableUpstream.build("engine", {})) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with serving(proxy) as url:
            asked = {"messages": [{"role": "user", "content": kind}]}
            answer = await client.post_json("proxy", url + "/v1/chat/completions", asked)
    assert answer.status == 502
    message = answer.data["error"]["message"]
    assert message.startswith("upstream answered HTTP 200 with a body that is not a JSON object: ")
    assert UNREADABLE_200[kind].decode()[:20] in message


class UuidOnlyUpstream(SimulatedModel):
    """An engine like llama.cpp's Python server: any X-Request-Id that is not a UUID is
    refused with an empty 400. Records the ids that reached it."""

    def add_routes(self, app: FastAPI) -> None:
        self.seen: list[str | None] = []

        @app.middleware("http")
        async def uuid_only(request: Request, call_next: Any) -> Response:
            request_id = request.headers.get("x-request-id")
            self.seen.append(request_id)
            if request_id is not None and not is_uuid(request_id):
                return Response(status_code=400)
            return await call_next(request)

        super().add_routes(app)


class ChatOnlyUpstream(SimulatedModel):
    """An engine without the Responses API (404 on /v1/responses)."""

    def add_routes(self, app: FastAPI) -> None:
        app.post("/v1/chat/completions")(self._chat)


FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0}}


async def test_auto_policy_switches_to_uuid_once_and_records_the_mapping(serving, client):
    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    upstream = UuidOnlyUpstream.build("engine", FAST)
    async with serving(upstream) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with serving(proxy) as url:
            first = await client.post_json(
                "proxy", url + "/r/3-0/v1/chat/completions", {"messages": ARITH}
            )
            second = await client.post_json(
                "proxy",
                url + "/v1/chat/completions",
                {"messages": ARITH},
                headers={"X-Request-Id": "3-0.1"},
            )
    assert first.status == second.status == 200
    assert isinstance(proxy, OpenAIUpstream) and proxy.id_policy == "uuid"
    # the first call tried the header once, then the UUID; the second went straight to the UUID
    assert upstream.seen == ["3-0.0", upstream_uuid("3-0.0"), upstream_uuid("3-0.1")]
    assert first.data["id"] == f"chatcmpl-{upstream_uuid('3-0.0')}"
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat m"]  # GenAI-named
    mapping = {
        s.attributes[names.MODEL_REQUEST_ID]: s.attributes[names.MODEL_UPSTREAM_REQUEST_ID]
        for s in chats
    }
    assert mapping == {"3-0.0": upstream_uuid("3-0.0"), "3-0.1": upstream_uuid("3-0.1")}
    assert all(s.attributes[names.ROLLOUT_ID] == "3-0" for s in chats)
    server_spans = [
        s for s in exporter.get_finished_spans() if s.kind.name == "SERVER" and s.resource
    ]
    scoped = [s for s in server_spans if s.attributes.get(names.HTTP_ROUTE, "").startswith("/r/")]
    assert scoped and all(s.attributes[names.ROLLOUT_ID] == "3-0" for s in scoped)


async def test_header_policy_refusal_is_passed_on_not_retried(serving, client):
    upstream = UuidOnlyUpstream.build("engine", FAST)
    async with serving(upstream) as upstream_url:
        options = {"base_url": upstream_url + "/v1", "model_name": "m", "request_id": "header"}
        async with serving(OpenAIUpstream.build("proxy", options)) as url:
            refused = await client.post_json(
                "proxy", url + "/r/3-0/v1/chat/completions", {"messages": ARITH}
            )
        options["request_id"] = "none"
        async with serving(OpenAIUpstream.build("proxy", options)) as url:
            bare = await client.post_json(
                "proxy", url + "/r/3-0/v1/chat/completions", {"messages": ARITH}
            )
    assert refused.status == 400
    assert refused.data["error"]["message"] == "upstream answered HTTP 400: (empty body)"
    assert upstream.seen == ["3-0.0", None]  # not retried; 'none' sends no id
    assert bare.status == 200


async def test_responses_are_translated_when_the_upstream_has_no_route(serving, client):
    upstream = ChatOnlyUpstream.build("engine", FAST)
    async with serving(upstream) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with serving(proxy) as url:
            answers = [
                await client.post_json(
                    "proxy", url + "/r/4-0/v1/responses", {"input": "Compute: 2 + 2"}
                )
                for _ in range(2)
            ]
    assert isinstance(proxy, OpenAIUpstream) and proxy.native_responses is False
    for turn, answer in enumerate(answers):
        assert answer.status == 200, answer.data
        assert answer.data["object"] == "response" and answer.data["id"] == f"resp_4-0.{turn}"
        assert answer.data["output"][0]["content"][0]["text"] == "Answer: 4"


async def test_a_stream_that_cannot_start_is_a_plain_error_answer(serving, client):
    proxy = OpenAIUpstream.build("proxy", {"base_url": "http://127.0.0.1:9/v1", "model_name": "m"})
    async with serving(proxy) as url:
        answer = await client.post_json(
            "proxy", url + "/v1/chat/completions", {"messages": ARITH, "stream": True}
        )
    assert answer.status == 502 and "cannot reach 'upstream'" in answer.data["error"]["message"]
