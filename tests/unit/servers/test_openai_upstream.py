"""The OpenAI-compatible upstream proxy, in front of a real (simulated) upstream server."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.http.server import OrjsonResponse
from rollgym.servers.base import Server

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
                "model": "served-model",
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
            "proxy", {"base_url": upstream_url + "/v1", "model": "m", "api_key_env": "UPSTREAM_KEY"}
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
        {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "NO_SUCH_KEY_VAR"},
    )
    with pytest.raises(RuntimeError, match="NO_SUCH_KEY_VAR"):
        await proxy.start()
    await proxy.stop()


async def test_unreachable_upstream_is_502(serving, client):
    proxy = OpenAIUpstream.build("proxy", {"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    async with serving(proxy) as url:
        answer = await client.post_json("proxy", url + "/v1/chat/completions", {"messages": ARITH})
    assert answer.status == 502 and "cannot reach 'upstream'" in answer.data["error"]["message"]
