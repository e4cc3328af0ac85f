"""Server-Timing end to end in-process: the model server reports its engine's seconds, an
environment its sandbox's, and both reach the rollout's usage over HTTP (an agent) and
in-process (an environment's own episode)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI, Request

import rollgym.server_timing as server_timing
from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.keychain import KeychainEnv
from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.http.server import OrjsonResponse
from rollgym.identity import episode_body
from rollgym.servers.base import Server
from rollgym.trajectory.usage import USAGE_KEY

LATENCY_S = 0.02
SANDBOX_S = 0.05


class SandboxedVerify(KeychainEnv):
    """The keychain, whose verification "runs in a sandbox" for SANDBOX_S (as the code
    environment's hidden tests do): the seconds a real sandbox exec notes."""

    async def verify(self, state: Any, answer: str | None) -> Any:
        server_timing.note(server_timing.SANDBOX, SANDBOX_S)
        return await super().verify(state, answer)


def _model() -> SimulatedModel:
    return SimulatedModel.build("policy", {"latency": {"kind": "fixed", "seconds": LATENCY_S}})


async def test_the_model_answers_with_its_engine_seconds(serving, client):
    async with serving(_model()) as url:
        body = {"model": "policy", "messages": [{"role": "user", "content": "2 + 2"}]}
        with server_timing.collecting() as timings:
            answer = await client.post_json("policy", url + "/v1/chat/completions", body)
        outside = await client.post_json("policy", url + "/v1/chat/completions", body)
    assert answer.status == 200 and outside.status == 200  # no scope: nothing noted, no error
    engine = timings.get(server_timing.ENGINE)
    assert engine is not None and LATENCY_S <= engine < LATENCY_S + 0.5


async def test_an_agents_usage_gets_engine_and_sandbox_seconds_over_http(serving, client):
    async with serving(_model()) as model_url:
        urls = {"policy": model_url}
        async with serving(SandboxedVerify.build("keys", {}, urls=dict(urls))) as keys_url:
            urls["keys"] = keys_url
            walker = ToolLoopAgent.build(
                "walker", {"model": "policy", "environment": "keys"}, urls=urls
            )
            async with serving(walker) as url:
                row = {"seed": 3, "hops": 2, "task_index": 0, "rollout_index": 0, "attempt": 0}
                answer = await client.post_json("walker", url + "/run", row)
    assert answer.status == 200, answer.data
    usage = answer.data[USAGE_KEY]
    assert usage["engine_s"] >= LATENCY_S * usage["model_calls"]
    assert usage["engine_s"] <= usage["model_s"] + 1e-3
    assert usage["sandbox_s"] == pytest.approx(SANDBOX_S)  # the one verification


async def test_an_episodes_usage_gets_them_in_process(serving, client):
    async with serving(_model()) as model_url:
        env = SandboxedVerify.build("keys", {"model": "policy"}, urls={"policy": model_url})
        async with serving(env) as url:
            body = episode_body("ep-1", 0, {"seed": 4, "hops": 2})
            answer = await client.post_json("keys", url + "/run", body)
    assert answer.status == 200, answer.data
    usage = answer.data[USAGE_KEY]
    assert usage["engine_s"] >= LATENCY_S * usage["model_calls"] > 0
    assert usage["sandbox_s"] == pytest.approx(SANDBOX_S)


class LlamaCppLike(Server):
    """An upstream answering as llama.cpp's server does: ``timings`` in the body, no header."""

    kind = "model"

    def add_routes(self, app: FastAPI) -> None:
        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> OrjsonResponse:
            await asyncio.sleep(0.3)  # the call's wall time: not what is reported
            return OrjsonResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                    "timings": {"prompt_ms": 30.0, "predicted_ms": 70.0},
                }
            )


async def _proxied_engine_seconds(serving, client, upstream: Server) -> float | None:
    async with serving(upstream) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with serving(proxy) as url:
            body = {"messages": [{"role": "user", "content": "Compute: 2 + 2"}]}
            with server_timing.collecting() as timings:
                answer = await client.post_json("proxy", url + "/v1/chat/completions", body)
    assert answer.status == 200, answer.data
    return timings.get(server_timing.ENGINE)


async def test_a_proxy_passes_on_the_engines_own_seconds(serving, client):
    """In front of an upstream that reports its engine (a rollgym model server's header,
    llama.cpp's ``timings``), the proxy reports that, not its own wait."""
    slow = SimulatedModel.build("engine", {"latency": {"kind": "fixed", "seconds": 0.05}})
    chained = await _proxied_engine_seconds(serving, client, slow)
    assert chained is not None and 0.05 <= chained < 0.3
    llama = await _proxied_engine_seconds(serving, client, LlamaCppLike.build("engine", {}))
    assert llama == pytest.approx(0.1)
