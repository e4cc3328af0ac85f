"""A rollout in the OpenTelemetry GenAI agent conventions, from real servers on loopback: the
``gym.rollout`` span an ``invoke_agent`` of the server that plays it, each tool call an
``execute_tool`` carrying the model's call id, each model call a ``chat`` in the rollout's
conversation, and the verification's reward an evaluation result (event and attributes)."""

from __future__ import annotations

from contextlib import AsyncExitStack

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.agents.tool_loop import ToolLoopAgent
from rollgym.builtins.envs.keychain import KeychainEnv
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.identity import episode_body
from rollgym.telemetry import names

FAST = {"kind": "fixed", "seconds": 0.0}


async def _play(serving, client) -> tuple[list[ReadableSpan], dict[str, float]]:
    """One agent rollout (``walker`` on ``keys``) and one environment episode (``keys``);
    every finished span and each rollout's answered reward."""
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with AsyncExitStack() as exits:
        urls: dict[str, str] = {}
        urls["policy"] = await exits.enter_async_context(
            serving(SimulatedModel.build("policy", {"latency": FAST}))
        )
        urls["keys"] = await exits.enter_async_context(
            serving(KeychainEnv.build("keys", {"model": "policy"}, urls=dict(urls)))
        )
        walker = ToolLoopAgent.build(
            "walker", {"model": "policy", "environment": "keys"}, urls=urls
        )
        url = await exits.enter_async_context(serving(walker))
        row = {"seed": 1, "hops": 2, "task_index": 4, "rollout_index": 0, "attempt": 0}
        agent = await client.post_json("walker", url + "/run", row)
        episode = await client.post_json(
            "keys", urls["keys"] + "/run", episode_body("ep-9", 0, {"seed": 2, "hops": 1})
        )
    assert agent.status == 200 and episode.status == 200, (agent.data, episode.data)
    rewards = {"4-0": agent.data["reward"], "ep-9": episode.data["reward"]}
    return list(exporter.get_finished_spans()), rewards


def _of(spans: list[ReadableSpan], name: str, rollout_id: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name and s.attributes.get(names.ROLLOUT_ID) == rollout_id]


async def test_a_rollout_is_an_invoke_agent_of_the_server_that_plays_it(serving, client):
    spans, _ = await _play(serving, client)
    for rollout_id, agent in (("4-0", "walker"), ("ep-9", "keys")):
        (rollout,) = _of(spans, names.SPAN_ROLLOUT, rollout_id)
        assert rollout.attributes[names.GEN_AI_OPERATION_NAME] == "invoke_agent"
        assert rollout.attributes[names.GEN_AI_AGENT_NAME] == agent
        assert rollout.attributes[names.GEN_AI_CONVERSATION_ID] == rollout_id


async def test_each_model_call_is_a_chat_in_the_rollouts_conversation(serving, client):
    spans, _ = await _play(serving, client)
    for rollout_id in ("4-0", "ep-9"):
        chats = _of(spans, names.SPAN_MODEL_CHAT, rollout_id)
        assert chats
        for chat in chats:
            attributes = chat.attributes
            assert attributes[names.GEN_AI_OPERATION_NAME] == "chat"
            assert attributes[names.GEN_AI_CONVERSATION_ID] == rollout_id
            assert attributes[names.GEN_AI_REQUEST_MODEL]
            assert attributes[names.GEN_AI_USAGE_INPUT_TOKENS] > 0
            assert attributes[names.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
            assert attributes[names.GEN_AI_RESPONSE_FINISH_REASONS]


async def test_each_tool_call_is_an_execute_tool_with_the_models_call_id(serving, client):
    spans, _ = await _play(serving, client)
    for rollout_id in ("4-0", "ep-9"):
        tools = _of(spans, names.SPAN_ENV_TOOL, rollout_id)
        assert tools
        for tool in tools:
            attributes = tool.attributes
            assert attributes[names.GEN_AI_OPERATION_NAME] == "execute_tool"
            assert attributes[names.GEN_AI_TOOL_NAME] == attributes[names.ENV_TOOL_NAME]
        # the simulated model names each call after its request id: call-<rollout>.<turn>...
        ids = [t.attributes[names.GEN_AI_TOOL_CALL_ID] for t in tools]
        assert len(set(ids)) == len(ids)
        assert all(i.startswith(f"call-{rollout_id}.") for i in ids), ids
        # no message text unless capture is on (rollgym's spans carry none)
        assert not any("gen_ai.tool.call.arguments" in t.attributes for t in tools)
        assert not any("gen_ai.tool.call.result" in t.attributes for t in tools)


async def test_the_reward_is_an_evaluation_result_event_and_attributes(serving, client):
    spans, rewards = await _play(serving, client)
    for rollout_id, reward in rewards.items():
        (verify,) = _of(spans, names.SPAN_VERIFY, rollout_id)
        assert verify.attributes[names.GEN_AI_EVALUATION_NAME] == "reward"
        assert verify.attributes[names.GEN_AI_EVALUATION_SCORE_VALUE] == reward
        (event,) = [e for e in verify.events if e.name == "gen_ai.evaluation.result"]
        assert event.attributes == {
            "gen_ai.evaluation.name": "reward",
            "gen_ai.evaluation.score.value": reward,
        }
