"""A model's mistake in a tool call is the model's: told to it as the tool's output, the episode
goes on. Real servers on loopback: the keychain environment, the ``tool_loop`` agent, an
environment's own episode ``/run``, and a model server that writes the mistake."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.keychain import KeychainEnv
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.errors import ServerCallError
from rollgym.identity import episode_body
from rollgym.servers import ChatRequest
from rollgym.servers.agent import Agent, task_of
from rollgym.servers.rollout_context import RolloutContext
from rollgym.servers.tools import (
    INVALID_ARGUMENTS,
    INVALID_JSON,
    NOT_AN_OBJECT,
    UNKNOWN_TOOL,
    ToolAnswer,
)
from rollgym.telemetry import names

FAST = {"kind": "fixed", "seconds": 0.0}

#: (what the model wrote as the first tool call: name, arguments text), the mistake, and a
#: piece of what the model is told
CASES = {
    "not_an_object_true": (
        ("read_key", "true"),
        NOT_AN_OBJECT,
        "must be a JSON object, got a boolean",
    ),
    "not_an_object_number": (("read_key", "48116.5"), NOT_AN_OBJECT, "got a number"),
    "invalid_json": (("read_key", '{"key": "k-'), INVALID_JSON, "are not valid JSON"),
    "schema": (("read_key", '{"door": 1}'), INVALID_ARGUMENTS, "arguments.key: Field required"),
    "unknown_tool": (("open_safe", "{}"), UNKNOWN_TOOL, "unknown tool 'open_safe'"),
}


class WritesModel(SimulatedModel):
    """The simulated policy, except that its first tool call of a rollout is what ``writes``
    says (a name and the arguments text, as a model's generation would give them)."""

    writes: ClassVar[tuple[str, str]] = ("read_key", "true")

    async def complete(
        self, request: ChatRequest, request_id: str | None, rollout_id: str | None
    ) -> dict[str, Any]:
        answer = await super().complete(request, request_id, rollout_id)
        if request_id is not None and request_id.endswith(".0"):
            call = answer["choices"][0]["message"]["tool_calls"][0]
            call["function"]["name"], call["function"]["arguments"] = self.writes
        return answer


def writer(name: str, arguments: str) -> type[WritesModel]:
    return type("Writes", (WritesModel,), {"writes": (name, arguments)})


async def servers(serving: Any, model: type[SimulatedModel], *, episode: bool) -> tuple:
    exits = AsyncExitStack()
    urls: dict[str, str] = {}
    urls["policy"] = await exits.enter_async_context(
        serving(model.build("policy", {"accuracy": 1.0, "latency": FAST}))
    )
    options = {"model": "policy", "trajectories": True, "max_turns": 6} if episode else {}
    urls["keys"] = await exits.enter_async_context(
        serving(KeychainEnv.build("keys", options, urls=dict(urls)))
    )
    return exits, urls


def row(seed: int) -> dict[str, Any]:
    return {"seed": seed, "hops": 2, "task_index": seed, "rollout_index": 0, "attempt": 0}


def check_told(answer: Any, mistake: str, told: str, written: tuple[str, str]) -> None:
    """The rollout completed; the mistake is in its trajectory and what the model read next."""
    assert answer.status == 200, answer.data
    data = answer.data
    assert data["turns"] >= 2 and data["tool_calls"] >= 1  # the model got a turn after it
    turns = data["trajectory"]["turns"]
    tool = next(t for t in turns if t["type"] == "tool")
    assert tool["error"] == mistake and tool["name"] == written[0]
    assert tool["arguments"] == written[1]  # as the model wrote them
    assert tool["output"].startswith("error: ") and told in tool["output"]
    second = [t for t in turns if t["type"] == "model"][1]
    said = second["messages"][-1]
    assert said["role"] == "tool" and said["content"] == tool["output"]
    assert turns[-1]["type"] == "verify"


@pytest.mark.parametrize("case", sorted(CASES))
async def test_tool_loop_agent_tells_the_model(serving, client, case):
    written, mistake, told = CASES[case]
    exits, urls = await servers(serving, writer(*written), episode=False)
    async with exits:
        looper = ToolLoopAgent.build(
            "walker",
            {"model": "policy", "environment": "keys", "max_turns": 6, "trajectories": True},
            urls=urls,
        )
        async with serving(looper) as url:
            answer = await client.post_json("walker", url + "/run", row(3))
        metrics = (await client.post_json("keys", urls["keys"] + "/aggregate_metrics", {})).data
    check_told(answer, mistake, told, written)
    assert metrics["tool_mistakes"] == 1 and metrics["open_sessions"] == 0


@pytest.mark.parametrize("case", sorted(CASES))
async def test_an_environments_episode_tells_the_model(serving, client, case):
    written, mistake, told = CASES[case]
    exits, urls = await servers(serving, writer(*written), episode=True)
    async with exits:
        answer = await client.post_json(
            "keys", urls["keys"] + "/run", episode_body("ep-1", 0, {"seed": 3, "hops": 2})
        )
    check_told(answer, mistake, told, written)


async def test_the_route_answers_each_mistake_and_the_span_says_whose(serving, client):
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(KeychainEnv.build("keys", {})) as url:
        seeded = await client.post_json(
            "keys", url + "/seed_session", {"rollout_id": "5-0", "task": {"seed": 5}}
        )
        sid = seeded.data["session_id"]
        answers = {}
        for case, ((name, arguments), _, _) in CASES.items():
            body = {"session_id": sid, "name": name, "arguments": arguments}
            answers[case] = await client.post_json("keys", url + "/model_tool_call", body)
        start = seeded.data["messages"][-1]["content"].split("Start key: ")[1].split()[0]
        good = await client.post_json(
            "keys",
            url + "/model_tool_call",
            {"session_id": sid, "name": "read_key", "arguments": f'{{"key": "{start}"}}'},
        )
        # a caller's own arguments that are not an object stay the caller's bug
        strict = await client.post_json(
            "keys", url + "/tools/read_key", {"session_id": sid, "arguments": True}
        )
        gone = await client.post_json(
            "keys", url + "/model_tool_call", {"session_id": "nope", "name": "read_key"}
        )
        metrics = (await client.post_json("keys", url + "/aggregate_metrics", {})).data
    for case, (_, mistake, told) in CASES.items():
        answer = answers[case]
        assert answer.status == 200 and answer.data["error"] == mistake, answer.data
        assert told in answer.data["output"]
    assert good.status == 200 and good.data == {"output": good.data["output"], "error": None}
    assert good.data["output"].startswith(("next key: ", "secret: "))
    assert strict.status == 400 and strict.data["field"] == "body.arguments"
    assert gone.status == 404 and gone.data["field"] == "session_id"
    assert metrics["tool_mistakes"] == len(CASES) and metrics["tool_calls"] == {"read_key": 1}
    tool_spans = [s for s in exporter.get_finished_spans() if s.name == names.SPAN_ENV_TOOL]
    assert len(tool_spans) == len(CASES) + 1
    marked = [s for s in tool_spans if names.ENV_TOOL_MODEL_ERROR in s.attributes]
    assert sorted(s.attributes[names.ENV_TOOL_MODEL_ERROR] for s in marked) == sorted(
        mistake for _, mistake, _ in CASES.values()
    )
    for span in tool_spans:  # the environment failed in none of them
        assert span.status.status_code is StatusCode.UNSET
        assert names.ERROR_TYPE not in span.attributes
        assert span.attributes[names.ROLLOUT_ID] == "5-0"


class OwnCallsAgent(Agent):
    """A custom agent: its own call of a tool with bad arguments (its author's bug), or the
    model's call handed on as written (the model's mistake)."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        told: ToolAnswer | None = None
        if row.get("own"):
            await rollout.env.call_tool("read_key", {"door": 1})
        else:
            completion = await rollout.chat(seeded["messages"], seeded["tools"])
            call = completion["choices"][0]["message"]["tool_calls"][0]["function"]
            told = await rollout.env.call_model_tool(call["name"], call["arguments"])
        verdict = await rollout.env.verify(None)
        return {"reward": verdict["reward"], "told": told.output if told else None}


async def test_a_custom_agent_own_bad_call_fails_the_model_s_is_told(serving, client):
    exits, urls = await servers(serving, writer("read_key", "48116.5"), episode=False)
    async with exits:
        agent = OwnCallsAgent.build("mine", {"model": "policy", "environment": "keys"}, urls=urls)
        async with serving(agent) as url:
            own = await client.post_json("mine", url + "/run", {**row(1), "own": True})
            model = await client.post_json("mine", url + "/run", row(2))
    # the agent's own bad call: a refusal retrying cannot cure (424, not retried)
    assert own.status == 424 and "arguments.key" in own.data["error"], own.data
    assert model.status == 200 and model.data["told"].startswith("error: the arguments of")


async def test_local_session_raises_a_refusal_for_its_own_calls():
    env = KeychainEnv.build("keys", {})
    from rollgym.servers.local_session import LocalEnvSession

    session = LocalEnvSession(env, "1-0")
    await session.seed({"seed": 1})
    with pytest.raises(ServerCallError) as refused:
        await session.call_tool("read_key", {"door": 1})
    assert refused.value.status == 400 and refused.value.field == "arguments.key"
    told = await session.call_model_tool("read_key", "[1, 2]")
    assert told == ToolAnswer(
        "error: the arguments of tool 'read_key' must be a JSON object, got an array",
        NOT_AN_OBJECT,
    )
    session.close()
