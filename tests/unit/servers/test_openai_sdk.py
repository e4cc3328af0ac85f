"""The official OpenAI Python SDK against both rollgym model servers, every call it makes.

Each test runs once against the ``simulated`` model and once against the ``openai`` proxy in
front of a simulated upstream (so the proxy's pass-through of streams and of every field is
exercised by a real client, not by our own). A fake is only as good as its last comparison
with the real client: these are that comparison.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import openai
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chat_shapes import READ_KEY
from rollgym.builtins.models import toy_tokenizer
from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers.base import Server
from rollgym.servers.rollout_context import ModelClient, RolloutContext
from rollgym.telemetry import names
from rollgym.telemetry.setup import install_for_tests

FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0}}
ARITH = [{"role": "user", "content": "Compute: 12 + 7 * 3\nReply with 'Answer: <number>'."}]
SUBMIT = {
    "type": "function",
    "function": {
        "name": "submit",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
}
START = [{"role": "user", "content": "Start key: k-00ab\nFind the secret."}]

Serve = Callable[[Server], AbstractAsyncContextManager[str]]


@pytest.fixture(params=["simulated", "proxy"])
def model_url(
    request: pytest.FixtureRequest, serving: Serve
) -> Callable[[], AbstractAsyncContextManager[str]]:
    """``async with model_url() as url``: a model server of the parameter's kind."""

    @asynccontextmanager
    async def start() -> AsyncIterator[str]:
        simulated = SimulatedModel.build("policy", {**FAST, "model_name": "sim"})
        async with serving(simulated) as url:
            if request.param == "simulated":
                yield url
                return
            proxy = OpenAIUpstream.build("proxy", {"base_url": url + "/v1", "model_name": "sim"})
            async with serving(proxy) as proxy_url:
                yield proxy_url

    return start


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/r/7-1/v1", api_key="unused", max_retries=0)


async def test_chat_completion_and_models(model_url):
    async with model_url() as url:
        client = sdk(url)
        answer = await client.chat.completions.create(model="sim", messages=ARITH)
        models = await client.models.list()
    assert answer.choices[0].message.content == "Answer: 33"
    assert answer.id == "chatcmpl-7-1.0"  # header-less on the scoped URL: <rollout>.<turn>
    # the simulated model's toy tokenizer: "Answer", ":", " 33", <|im_end|>
    assert answer.usage is not None and answer.usage.completion_tokens == 4
    assert [m.id for m in models.data] == ["sim"]


async def test_streaming_chat_joins_to_the_same_answer(model_url):
    async with model_url() as url:
        client = sdk(url)
        whole = await client.chat.completions.create(model="sim", messages=ARITH)
        stream = await client.chat.completions.create(
            model="sim", messages=ARITH, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        bare = await client.chat.completions.create(model="sim", messages=ARITH, stream=True)
        bare_chunks = [chunk async for chunk in bare]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == "Answer: 33"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert all(c.usage is None for c in bare_chunks)  # no usage chunk unless asked for


async def test_streaming_tool_calls(model_url):
    async with model_url() as url:
        stream = await sdk(url).chat.completions.create(
            model="sim", messages=START, tools=[READ_KEY], stream=True
        )
        chunks = [chunk async for chunk in stream]
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls and calls[0].function.name == "read_key"
    assert orjson.loads(calls[0].function.arguments) == {"key": "k-00ab"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_null_fields_mean_default(model_url):
    async with model_url() as url:
        answer = await sdk(url).chat.completions.create(
            model="sim",
            messages=ARITH,
            extra_body={"stream": None, "n": None, "temperature": None, "tools": None},
        )
    assert answer.choices[0].message.content == "Answer: 33"


async def test_n_choices_temperature_and_token_limits(model_url):
    async with model_url() as url:
        client = sdk(url)
        three = await client.chat.completions.create(model="sim", messages=ARITH, n=3)
        greedy = await client.chat.completions.create(
            model="sim", messages=START, tools=[READ_KEY], n=2, temperature=0
        )
        short = await client.chat.completions.create(model="sim", messages=ARITH, max_tokens=1)
        shorter = await client.chat.completions.create(
            model="sim", messages=ARITH, max_completion_tokens=1
        )
    assert [c.index for c in three.choices] == [0, 1, 2]
    generated = sum(
        len(toy_tokenizer.body_pieces({"content": c.message.content})) for c in three.choices
    )
    assert three.usage is not None and three.usage.completion_tokens == generated
    assert greedy.choices[0].message.tool_calls[0].function.arguments == (
        greedy.choices[1].message.tool_calls[0].function.arguments
    )
    for cut in (short, shorter):
        assert cut.choices[0].finish_reason == "length"
        assert cut.choices[0].message.content == "Answer"  # one toy token
        assert cut.usage is not None and cut.usage.completion_tokens == 1


async def test_tool_choice_none_required_and_named(model_url):
    async with model_url() as url:
        client = sdk(url)
        none = await client.chat.completions.create(
            model="sim", messages=START, tools=[READ_KEY], tool_choice="none"
        )
        required = await client.chat.completions.create(
            model="sim", messages=ARITH, tools=[SUBMIT], tool_choice="required"
        )
        named = await client.chat.completions.create(
            model="sim",
            messages=START,
            tools=[READ_KEY, SUBMIT],
            tool_choice={"type": "function", "function": {"name": "submit"}},
        )
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason == "stop"
    (call,) = required.choices[0].message.tool_calls
    assert call.function.name == "submit"
    assert orjson.loads(call.function.arguments) == {"answer": "Answer: 33"}
    assert named.choices[0].message.tool_calls[0].function.name == "submit"


async def test_logprobs_are_accepted(model_url):
    async with model_url() as url:
        answer = await sdk(url).chat.completions.create(
            model="sim", messages=ARITH, logprobs=True, top_logprobs=2
        )
    assert answer.choices[0].message.content == "Answer: 33"


async def test_errors_reach_the_sdk_with_their_message(model_url):
    async with model_url() as url:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk(url).chat.completions.create(model="sim", messages=[])
        with pytest.raises(openai.BadRequestError) as bad_choice:
            await sdk(url).chat.completions.create(
                model="sim", messages=ARITH, tool_choice="sometimes"
            )
    assert "body.messages" in refused.value.message
    assert "tool_choice" in bad_choice.value.message


async def test_responses_plain_and_streamed(model_url):
    async with model_url() as url:
        client = sdk(url)
        response = await client.responses.create(model="sim", input=ARITH[0]["content"])
        stream = await client.responses.create(model="sim", input=ARITH[0]["content"], stream=True)
        events = [event async for event in stream]
        async with client.responses.stream(
            model="sim",
            input=START[0]["content"],
            tools=[
                {
                    "type": "function",
                    "name": "read_key",
                    "parameters": READ_KEY["function"]["parameters"],
                }
            ],
        ) as helper:
            final = await helper.get_final_response()
    assert response.output_text == "Answer: 33"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Answer: 33"
    assert events[-1].type == "response.completed"
    assert events[-1].response.usage is not None and events[-1].response.usage.output_tokens == 4
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "read_key" and orjson.loads(call.arguments) == {"key": "k-00ab"}


async def test_rollout_sdk_clients_carry_the_trace_and_the_request_id(serving, client):
    exporter = InMemorySpanExporter()
    install_for_tests(exporter)
    from opentelemetry import trace

    tracer = trace.get_tracer("test")
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        model = ModelClient(client, "policy", url, rollout_id="9-0", model_name="sim", timeout=30)
        rollout = RolloutContext("9-0", model, None)
        with tracer.start_as_current_span("gym.rollout") as parent:
            sdk_answer = await rollout.async_openai().chat.completions.create(
                model="sim", messages=ARITH
            )
            own = await rollout.chat(ARITH)  # the same turn counter
            sync_answer = await asyncio.to_thread(
                rollout.openai().chat.completions.create, model="sim", messages=ARITH
            )
        await rollout.aclose()
    assert [sdk_answer.id, own["id"], sync_answer.id] == [
        "chatcmpl-9-0.0",
        "chatcmpl-9-0.1",
        "chatcmpl-9-0.2",
    ]
    finished = exporter.get_finished_spans()
    trace_id = parent.get_span_context().trace_id
    chats = [s for s in finished if s.name == names.SPAN_MODEL_CHAT]
    engines = [s for s in finished if s.name == names.SPAN_ENGINE_REQUEST]
    assert len(chats) == len(engines) == 3
    for span in chats + engines:
        assert span.context.trace_id == trace_id  # the model server joined the caller's trace
        assert span.attributes[names.ROLLOUT_ID] == "9-0"
    for chat in chats:
        assert chat.parent.span_id == parent.get_span_context().span_id
        assert chat.attributes[names.GEN_AI_USAGE_OUTPUT_TOKENS] == 4  # "Answer: 33" in toy tokens
