"""A model server loads the trainer's checkpoint before it stamps the new version.

Calls in flight finish under the old weights with the old stamp; calls that arrive during the
swap wait and carry the new one; a load that fails leaves the old weights and version serving
and answers one line naming the reason. The ``openai`` proxy forwards the load to vLLM's
dev-mode routes (checked here against a loopback engine that records what it is sent; the
real vLLM is tests/e2e/test_vllm_weight_reload.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.http.server import OrjsonResponse
from rollgym.servers import ModelServer
from waits import until

ASK = {"messages": [{"role": "user", "content": "Compute: 1 + 2\nReply with 'Answer: <n>'."}]}
SLOW = {"latency": {"kind": "fixed", "seconds": 0.5}, "prefill_share": 0.0}


class _HeldLoad(SimulatedModel):
    """The simulated engine whose load waits until the test lets it finish."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loading = asyncio.Event()
        self.finish = asyncio.Event()
        self.in_flight_at_load = -1

    async def load_weights(self, path: str) -> None:
        self.in_flight_at_load = self._gate.calls
        self.loading.set()
        await self.finish.wait()
        await super().load_weights(path)


async def test_in_flight_calls_keep_the_old_stamp_and_late_ones_wait(
    serving, client, tmp_path: Path
) -> None:
    model = _HeldLoad.build("policy", SLOW)
    async with serving(model) as url:
        chat = url + "/v1/chat/completions"
        await client.post_json("policy", url + "/policy_version", {"version": 1})
        before = asyncio.ensure_future(client.post_json("policy", chat, ASK))
        streamed = asyncio.ensure_future(client.post_json("policy", chat, {**ASK, "stream": True}))
        await until(lambda: model._gate.calls == 2, "both calls to be generating")
        swap = asyncio.ensure_future(
            client.post_json(
                "policy", url + "/policy_version", {"version": 2, "weights": str(tmp_path)}
            )
        )
        await asyncio.wait_for(model.loading.wait(), 10)
        assert model.in_flight_at_load == 0  # the load began only once both had answered
        old, old_stream = (await before).data, await streamed
        assert old["policy_version"] == 1 and "policy_version_end" not in old
        assert old_stream.headers is not None
        assert old_stream.headers.get("x-rollgym-policy-version") == "1"
        during = asyncio.ensure_future(client.post_json("policy", chat, ASK))
        await asyncio.sleep(0.3)
        assert not during.done()  # held while the weights load
        model.finish.set()
        answer = await swap
        assert answer.status == 200 and answer.data == {"version": 2, "weights": str(tmp_path)}
        assert (await during).data["policy_version"] == 2
        read = await client.get_json("policy", url + "/policy_version")
        assert read.data == {"version": 2, "weights": str(tmp_path)}


async def test_a_failed_load_keeps_the_old_weights_and_says_why(
    serving, client, tmp_path: Path
) -> None:
    async with serving(SimulatedModel.build("policy", {})) as url:
        route = url + "/policy_version"
        await client.post_json("policy", route, {"version": 1, "weights": str(tmp_path)})
        missing = str(tmp_path / "step-2")
        failed = await client.post_json("policy", route, {"version": 2, "weights": missing})
        assert failed.status == 422 and failed.data["field"] == "weights"
        assert failed.data["error"] == (
            f"could not load {missing}: no checkpoint at {missing}; the weights before still serve"
        )
        assert (await client.get_json("policy", route)).data == {
            "version": 1,
            "weights": str(tmp_path),
        }
        answer = await client.post_json("policy", url + "/v1/chat/completions", ASK)
        assert answer.data["policy_version"] == 1
        bad = await client.post_json("policy", route, {"version": 3, "weights": 7})
        assert bad.status == 400 and bad.data["field"] == "weights"


async def test_a_server_that_cannot_load_weights_says_so(serving, client, tmp_path: Path) -> None:
    class Plain(ModelServer):
        async def complete(self, request: Any, request_id: Any, rollout_id: Any) -> Any:
            return {"choices": []}

    async with serving(Plain.build("plain", {})) as url:
        answer = await client.post_json(
            "plain", url + "/policy_version", {"version": 1, "weights": str(tmp_path)}
        )
    assert answer.status == 422
    assert "model server 'plain' cannot load weights" in answer.data["error"]


class _DevModeEngine(ModelServer):
    """A loopback engine with vLLM's two dev-mode routes, recording what it is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, Any]] = []
        self.reload_status = 200

    def add_routes(self, app: FastAPI) -> None:
        super().add_routes(app)

        @app.post("/collective_rpc")
        async def rpc(request: Request) -> Response:
            self.seen.append(("/collective_rpc", orjson.loads(await request.body())))
            if self.reload_status != 200:
                return Response("Internal Server Error", status_code=self.reload_status)
            return OrjsonResponse({"results": [None]})

        @app.post("/reset_prefix_cache")
        async def reset(request: Request) -> Response:
            self.seen.append(("/reset_prefix_cache", None))
            return Response(status_code=200)


async def test_the_openai_proxy_reloads_vllm_from_disk(serving, client, tmp_path: Path) -> None:
    checkpoint = tmp_path / "step-2"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"")
    empty = tmp_path / "empty"
    empty.mkdir()
    engine = _DevModeEngine.build("engine", {})
    async with serving(engine) as engine_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": engine_url + "/v1", "model_name": "m"})
        async with serving(proxy) as url:
            route = url + "/policy_version"
            loaded = await client.post_json(
                "proxy", route, {"version": 2, "weights": str(checkpoint)}
            )
            assert loaded.status == 200, loaded.data
            assert engine.seen == [
                (
                    "/collective_rpc",
                    {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}},
                ),
                ("/reset_prefix_cache", None),
            ]
            refused = await client.post_json("proxy", route, {"version": 3, "weights": str(empty)})
            assert refused.status == 422 and "no weight files" in refused.data["error"]
            assert len(engine.seen) == 2  # never sent to the engine
            engine.reload_status = 500
            broken = await client.post_json(
                "proxy", route, {"version": 4, "weights": str(checkpoint)}
            )
            assert broken.status == 422
            assert "the engine failed to reload the weights (HTTP 500" in broken.data["error"]
            assert (await client.get_json("proxy", route)).data["version"] == 2
        plain = SimulatedModel.build("plain", {})
        async with serving(plain) as plain_url:
            proxy = OpenAIUpstream.build(
                "proxy", {"base_url": plain_url + "/v1", "model_name": "m"}
            )
            async with serving(proxy) as url:
                no_dev = await client.post_json(
                    "proxy", url + "/policy_version", {"version": 2, "weights": str(checkpoint)}
                )
    assert no_dev.status == 422 and "VLLM_SERVER_DEV_MODE=1" in no_dev.data["error"]
