"""The simulated policy model: solves the built-ins when correct, deterministic, OpenAI shape."""

from __future__ import annotations

import random
import time

import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollgym.builtins.models.policy import decide
from rollgym.builtins.models.simulated import Latency, SimulatedModel, stable_seed
from rollgym.servers.model import rollout_of_request_id
from rollgym.telemetry import names


def fast_model_options(**overrides):
    return {"latency": {"kind": "fixed", "seconds": 0.0}, **overrides}


ARITH = [{"role": "user", "content": "Compute: 12 + 7 * 3\nReply with 'Answer: <number>'."}]
READ_KEY = [{"type": "function", "function": {"name": "read_key", "parameters": {}}}]


def test_policy_computes_and_follows_the_chain():
    rng = random.Random(1)
    assert decide(ARITH, set(), True, rng).content == "Answer: 33"
    wrong = decide(ARITH, set(), False, rng).content
    assert wrong.startswith("Answer: ") and wrong != "Answer: 33"
    start = [{"role": "user", "content": "Start key: k-00ab\nFind the secret."}]
    assert decide(start, {"read_key"}, True, rng).tool_call == ("read_key", {"key": "k-00ab"})
    step = [*start, {"role": "assistant"}, {"role": "tool", "content": "next key: k-99"}]
    assert decide(step, {"read_key"}, True, rng).tool_call == ("read_key", {"key": "k-99"})
    done = [*step, {"role": "tool", "content": "secret: S-abcdef123456"}]
    assert decide(done, {"read_key"}, True, rng).content == "Answer: S-abcdef123456"
    corrupted = decide(done, {"read_key"}, False, rng).content
    assert corrupted != "Answer: S-abcdef123456" and corrupted.startswith("Answer: S-")


def test_stable_seed_and_request_id_parsing():
    assert stable_seed("3-0.1") == stable_seed("3-0.1") != stable_seed("3-0.2")
    assert rollout_of_request_id("3-0-a2.4") == "3-0-a2"
    assert rollout_of_request_id("custom.id.0") == "custom.id"
    assert rollout_of_request_id("abc") is None
    assert rollout_of_request_id("abc.x") is None


def test_latency_distributions():
    rng = random.Random(0)
    assert Latency(kind="fixed", seconds=0.5).sample(rng) == 0.5
    assert all(
        0.1 <= Latency(kind="uniform", low=0.1, high=0.2).sample(rng) <= 0.2 for _ in range(50)
    )
    samples = sorted(
        Latency(kind="lognormal", seconds=0.02, sigma=0.5).sample(rng) for _ in range(501)
    )
    assert 0.015 < samples[250] < 0.027


async def test_completion_shape_determinism_and_tool_calls(serving, client):
    model = SimulatedModel.build("policy", fast_model_options(accuracy=1.0))
    async with serving(model) as url:
        first = await client.post_json(
            "policy",
            url + "/r/5-1/v1/chat/completions",
            {"messages": ARITH},
            headers={"X-Request-Id": "5-1.0"},
        )
        again = await client.post_json(
            "policy",
            url + "/r/5-1/v1/chat/completions",
            {"messages": ARITH},
            headers={"X-Request-Id": "5-1.0"},
        )
        tool = await client.post_json(
            "policy",
            url + "/v1/chat/completions",
            {
                "model": "x",
                "messages": [{"role": "user", "content": "Start key: k-1"}],
                "tools": READ_KEY,
            },
            headers={"X-Request-Id": "5-2.0"},
        )
        empty = await client.post_json("policy", url + "/v1/chat/completions", {"messages": []})
    answer = first.data
    assert answer["id"] == "chatcmpl-5-1.0"
    assert answer["choices"][0]["message"]["content"] == "Answer: 33"
    assert answer["usage"]["prompt_tokens"] == 25 and answer["usage"]["total_tokens"] == 29
    assert {k: v for k, v in again.data.items() if k != "created"} == {
        k: v for k, v in answer.items() if k != "created"
    }
    call = tool.data["choices"][0]["message"]["tool_calls"][0]
    assert tool.data["choices"][0]["finish_reason"] == "tool_calls"
    assert orjson.loads(call["function"]["arguments"]) == {"key": "k-1"}
    assert empty.status == 400 and empty.data["error"]["param"] == "body.messages"


async def test_accuracy_is_per_rollout_and_roughly_respected(serving, client):
    model = SimulatedModel.build("policy", fast_model_options(accuracy=0.5))
    async with serving(model) as url:
        rewards = []
        for index in range(200):
            response = await client.post_json(
                "policy",
                url + "/v1/chat/completions",
                {"messages": ARITH},
                headers={"X-Request-Id": f"{index}-0.0"},
            )
            rewards.append(response.data["choices"][0]["message"]["content"] == "Answer: 33")
    assert 70 < sum(rewards) < 130


async def test_latency_is_slept_not_burnt(serving, client):
    import asyncio

    model = SimulatedModel.build("policy", {"latency": {"kind": "fixed", "seconds": 0.3}})
    async with serving(model) as url:
        started = time.monotonic()
        cpu = time.process_time()
        await asyncio.gather(
            *(
                client.post_json("policy", url + "/v1/chat/completions", {"messages": ARITH})
                for _ in range(100)
            )
        )
        elapsed = time.monotonic() - started
    # Slept, not burnt: 100 requests of 0.3 s overlap (served one after another they would
    # take 30 s), and the CPU they cost is far below their latency. The bounds leave a wide
    # margin so a loaded machine cannot fail the test; only serial or busy-waiting latency can.
    assert 0.3 <= elapsed < 15.0
    assert time.process_time() - cpu < 5.0


async def _one_chat_traced(serving, client, path: str, request_id: str) -> list:
    """The finished spans of one chat call to a fresh simulated model at ``path`` with header
    ``X-Request-Id: request_id``, caught by an in-memory exporter."""
    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    async with serving(SimulatedModel.build("policy", fast_model_options())) as url:
        await client.post_json(
            "policy", url + path, {"messages": ARITH}, headers={"X-Request-Id": request_id}
        )
    return list(exporter.get_finished_spans())


async def test_engine_span_names_the_rollout(serving, client):
    spans = await _one_chat_traced(serving, client, "/r/9-0/v1/chat/completions", "9-0.3")
    engine = [s for s in spans if s.name == names.SPAN_ENGINE_REQUEST]
    server = [s for s in spans if s.name.startswith("POST /r/")]
    assert engine and engine[0].attributes[names.ROLLOUT_ID] == "9-0"
    assert server[0].name == "POST /r/{rollout_id}/v1/chat/completions"
    assert engine[0].parent.span_id == server[0].context.span_id


async def test_engine_span_reports_queue_first_token_and_e2e_latency(serving, client):
    """With one engine slot, the second of two concurrent requests waits in the queue."""
    import asyncio

    from rollgym.telemetry.setup import install_for_tests

    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    options = {
        "latency": {"kind": "fixed", "seconds": 0.2},
        "max_concurrent": 1,
        "prefill_share": 0.5,
    }
    async with serving(SimulatedModel.build("policy", options)) as url:
        await asyncio.gather(
            *(
                client.post_json(
                    "policy",
                    url + "/v1/chat/completions",
                    {"messages": ARITH},
                    headers={"X-Request-Id": f"{i}-0.0"},
                )
                for i in range(2)
            )
        )
    engine = sorted(
        (s for s in exporter.get_finished_spans() if s.name == names.SPAN_ENGINE_REQUEST),
        key=lambda s: s.attributes[names.GEN_AI_LATENCY_TIME_IN_QUEUE],
    )
    first, second = (s.attributes for s in engine)
    # Sleeps are never shorter than asked, but a loaded machine may make them much longer:
    # the lower bounds are the model's latency, the upper ones only "not absurd".
    slow_s = 10.0
    assert second[names.GEN_AI_LATENCY_TIME_IN_QUEUE] >= 0.18  # waited for the one slot
    # the first did not: its wait is shorter than the slot's hold the second one waited for
    assert first[names.GEN_AI_LATENCY_TIME_IN_QUEUE] < 0.18
    for attributes in (first, second):
        queued = attributes[names.GEN_AI_LATENCY_TIME_IN_QUEUE]
        to_first = attributes[names.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN] - queued
        end_to_end = attributes[names.GEN_AI_LATENCY_E2E] - queued
        assert 0.09 <= to_first < end_to_end < slow_s and end_to_end >= 0.19
        assert attributes[names.GEN_AI_USAGE_PROMPT_TOKENS] > 0  # vLLM's names
        assert attributes[names.GEN_AI_USAGE_COMPLETION_TOKENS] > 0
        # vLLM's model-time split: prefill + decode = inference = e2e - queue
        prefill = attributes[names.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL]
        decode = attributes[names.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE]
        inference = attributes[names.GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE]
        assert 0.09 <= prefill < slow_s and 0.09 <= decode < slow_s
        assert inference == pytest.approx(prefill + decode)
        assert inference == pytest.approx(attributes[names.GEN_AI_LATENCY_E2E] - queued)


@pytest.mark.parametrize("header", ["t%C3%A2che-1.3", "tâche-1.3"], ids=["encoded", "raw-utf8"])
async def test_a_non_ascii_request_id_names_its_rollout(serving, client, header):
    """rollgym sends a non-ASCII id percent-encoded; a client sending raw UTF-8 is read as
    UTF-8, not as the Latin-1 an ASGI server hands over."""
    spans = await _one_chat_traced(serving, client, "/v1/chat/completions", header)
    engine = [s for s in spans if s.name == names.SPAN_ENGINE_REQUEST]
    assert engine and engine[0].attributes[names.ROLLOUT_ID] == "tâche-1"
