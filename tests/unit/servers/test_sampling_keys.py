"""Sampling keys an engine accepts reach the model server's request unchanged; ``extra_body``
is merged into the body; a sampling value that is not an object is refused naming where.

Real servers on loopback: the simulated model (recording each request's body as it arrived),
the keychain environment, the built-in agents and an environment's episode ``/run``."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import yaml
from starlette.requests import Request
from starlette.responses import Response

from rollgym.builtins.agents.nemo_gym_row import NemoGymRowAgent
from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.keychain import KeychainEnv
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.config import load_config
from rollgym.errors import ConfigError
from rollgym.identity import episode_body
from server_specs import agent_spec

FAST = {"kind": "fixed", "seconds": 0.0}

#: The keys the brief of this change names, with values vLLM 0.32 accepts.
ENGINE_KEYS: dict[str, Any] = {
    "chat_template_kwargs": {"enable_thinking": False},
    "min_tokens": 2,
    "ignore_eos": True,
    "response_format": {"type": "text"},
    "stop_token_ids": [7],
    "temperature": 0.5,
}


class RecordingModel(SimulatedModel):
    """The simulated model, keeping every chat request's JSON body as it arrived."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def add_routes(self, app: Any) -> None:
        @app.middleware("http")
        async def keep(request: Request, call_next: Any) -> Response:
            if request.url.path.endswith("/chat/completions"):
                type(self).bodies.append(orjson.loads(await request.body()))
            return await call_next(request)

        super().add_routes(app)


async def servers(serving: Any, **keys: Any) -> tuple[AsyncExitStack, dict[str, str]]:
    RecordingModel.bodies = []
    exits = AsyncExitStack()
    urls: dict[str, str] = {}
    urls["policy"] = await exits.enter_async_context(
        serving(RecordingModel.build("policy", {"latency": FAST}))
    )
    urls["keys"] = await exits.enter_async_context(
        serving(KeychainEnv.build("keys", {"model": "policy", **keys}, urls=dict(urls)))
    )
    return exits, urls


def row(**fields: Any) -> dict[str, Any]:
    return {"seed": 1, "hops": 1, "task_index": 0, "rollout_index": 0, "attempt": 0, **fields}


async def test_engine_keys_and_extra_body_reach_the_model_unchanged(serving, client):
    sampling = {
        **ENGINE_KEYS,
        "extra_body": {"vllm_xargs": {"a": 1}, "min_tokens": 3, "priority": 0},
    }
    exits, urls = await servers(serving)
    async with exits:
        walker = ToolLoopAgent.build(
            "walker",
            {"model": "policy", "environment": "keys", "sampling": sampling},
            urls=urls,
        )
        async with serving(walker) as url:
            plain = await client.post_json("walker", url + "/run", row())
            sent_plain = list(RecordingModel.bodies)
            RecordingModel.bodies.clear()
            # the row's own sampling: named keys and extra_body keys win key by key
            over = {"ignore_eos": False, "extra_body": {"priority": 3, "cache_salt": "s"}}
            overridden = await client.post_json("walker", url + "/run", row(sampling=over))
            sent_over = list(RecordingModel.bodies)
    assert plain.status == 200 and overridden.status == 200, (plain.data, overridden.data)
    assert sent_plain and sent_over
    for body in sent_plain:
        assert {k: body[k] for k in ENGINE_KEYS if k != "min_tokens"} == {
            k: v for k, v in ENGINE_KEYS.items() if k != "min_tokens"
        }
        # extra_body's keys are merged in, over a named key of the same name, as the SDK does
        assert body["min_tokens"] == 3 and body["vllm_xargs"] == {"a": 1}
        assert body["priority"] == 0 and "extra_body" not in body
    for body in sent_over:
        assert body["ignore_eos"] is False and body["priority"] == 3
        assert body["cache_salt"] == "s" and body["vllm_xargs"] == {"a": 1}
        assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_an_episode_passes_the_tasks_sampling_on(serving, client):
    exits, urls = await servers(serving, sampling={"min_tokens": 1})
    async with exits:
        task = {"seed": 2, "hops": 1, "sampling": {"extra_body": {"top_k": 5, "seed": 9}}}
        answer = await client.post_json("keys", urls["keys"] + "/run", episode_body("e", 0, task))
    assert answer.status == 200, answer.data
    assert all((b["min_tokens"], b["top_k"], b["seed"]) == (1, 5, 9) for b in RecordingModel.bodies)


@pytest.mark.parametrize(
    ("sampling", "said"),
    [
        (["temperature", 0.5], "must be an object of sampling parameters, got an array"),
        ("hot", "must be an object of sampling parameters, got a string"),
        (0, "must be an object of sampling parameters, got a number"),
        ({"extra_body": [1]}, "'extra_body' must be an object of request fields, got an array"),
        ({"extra_body": {"messages": []}}, "'messages' is set by rollgym"),
        ({"extra_body": {"stream": True}}, "'stream' is set by rollgym"),
        ({"temprature": 1}, "unknown sampling parameter 'temprature'"),
    ],
)
async def test_a_rows_bad_sampling_is_refused_naming_the_field(serving, client, sampling, said):
    exits, urls = await servers(serving)
    async with exits:
        walker = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys"}, urls=urls
        )
        nemo = NemoGymRowAgent.build("nemo", {"model": "policy", "environment": "keys"}, urls=urls)
        async with serving(walker) as url, serving(nemo) as nemo_url:
            agent = await client.post_json("walker", url + "/run", row(sampling=sampling))
            nemo_row = {
                **row(sampling=sampling),
                "responses_create_params": {"input": "Start"},
                "agent_ref": {"name": "x"},
            }
            nemo_answer = await client.post_json("nemo", nemo_url + "/run", nemo_row)
        task = {"seed": 1, "sampling": sampling}
        episode = await client.post_json("keys", urls["keys"] + "/run", episode_body("e", 0, task))
    assert RecordingModel.bodies == []  # nothing was passed on
    for answer in (agent, nemo_answer, episode):
        assert answer.status == 400, answer.data
        assert answer.data["field"] == "row.sampling" and said in answer.data["error"]
        assert "\n" not in answer.data["error"]


@pytest.mark.parametrize(
    ("sampling", "said"),
    [
        (["temperature"], "servers.walker.sampling"),
        ("hot", "servers.walker.sampling"),
        ({"extra_body": "x"}, "'extra_body' must be an object of request fields, got a string"),
        ({"extra_body": {"model": "other"}}, "'model' is set by rollgym"),
    ],
)
def test_a_configs_bad_sampling_is_one_line_naming_the_key(tmp_path: Path, sampling, said):
    config = {
        "run": {"input": "rows.jsonl", "agent": "walker"},
        "servers": {
            "policy": {"kind": "model", "impl": "simulated"},
            "keys": {"kind": "environment", "impl": "keychain"},
            "walker": agent_spec("tool_loop", "keys", sampling=sampling),
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message and said in message
    assert caught.value.key_path == "servers.walker.sampling"
