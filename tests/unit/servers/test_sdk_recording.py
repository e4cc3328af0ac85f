"""Every model call an agent makes through its rollout's OpenAI SDK client is recorded whole:
sync and async, streamed or not, chat and Responses, n = 2; and an answer cut short, as
llama.cpp's server cuts a stream it interrupts, is recorded as incomplete.

Real servers on loopback: rollgym's simulated model, and, for the cut streams, a small upstream
of the test's own that ends its stream the ways real engines do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import openai
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers import sdk_pool
from rollgym.servers.rollout_context import ModelClient, RolloutContext
from rollgym.telemetry import names
from rollgym.telemetry.groups import configure_gate
from rollgym.telemetry.setup import install_for_tests
from rollgym.trajectory.conversation import conversation, full_messages
from rollgym.trajectory.record import TrajectoryRecorder
from uvicorn_thread import uvicorn_in_loop

FAST = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0}, "model_name": "sim"}
ARITH = [{"role": "user", "content": "Compute: 12 + 7 * 3\nReply with 'Answer: <number>'."}]
TOKENS = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}


@pytest.fixture(autouse=True)
async def _sdk_pool_closed() -> AsyncIterator[None]:
    """Closes the test loop's SDK pool: a served rollgym server closes it at its shutdown, but
    the tests against an upstream of their own have none, and the pool's aiohttp sessions were
    left to the garbage collector ("Unclosed client session" at the suite's end)."""
    yield
    await sdk_pool.aclose_async_pool()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    install_for_tests(memory)
    yield memory
    configure_gate(frozenset(), tracing_active=False)


def _rollout(client: Any, url: str, rollout_id: str = "5-0") -> RolloutContext:
    model = ModelClient(client, "policy", url, rollout_id=rollout_id, model_name="sim", timeout=30)
    return RolloutContext(rollout_id, model, None, trajectory=TrajectoryRecorder("tokens"))


def _model_turns(rollout: RolloutContext) -> list[dict[str, Any]]:
    assert rollout.trajectory is not None
    return [t for t in rollout.trajectory.to_json()["turns"] if t["type"] == "model"]


def _chats(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == names.SPAN_MODEL_CHAT]


async def test_every_way_of_calling_is_one_whole_turn(serving, client, exporter) -> None:
    simulated = SimulatedModel.build("policy", FAST)
    async with serving(simulated) as url:
        rollout = _rollout(client, url)
        sdk = rollout.async_openai()
        await sdk.chat.completions.create(model="sim", messages=ARITH, extra_body=TOKENS)
        stream = await sdk.chat.completions.create(
            model="sim",
            messages=ARITH,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=TOKENS,
        )
        read_last: list[int] = []
        async for _chunk in stream:
            read_last[:] = [time.time_ns()]  # when the agent had read the latest chunk
        blocking = rollout.openai()
        await asyncio.to_thread(
            blocking.chat.completions.create, model="sim", messages=ARITH, extra_body=TOKENS
        )

        def read_stream() -> None:
            chunks = blocking.chat.completions.create(
                model="sim", messages=ARITH, stream=True, stream_options={"include_usage": True}
            )
            for _chunk in chunks:
                pass

        await asyncio.to_thread(read_stream)
        await sdk.responses.create(model="sim", input=ARITH[0]["content"])
        events = await sdk.responses.create(model="sim", input=ARITH[0]["content"], stream=True)
        async for _event in events:
            pass
        await rollout.aclose()
    turns = _model_turns(rollout)
    assert len(turns) == 6
    assert [t["request_id"] for t in turns] == [f"5-0.{i}" for i in range(6)]
    for turn in turns:
        assert turn["message"]["content"] == "Answer: 33", turn
        assert turn["finish_reason"] == "stop" and "incomplete" not in turn
        assert turn["response_id"].endswith(turn["request_id"])
        assert turn["usage"]["completion_tokens"] == 4
    assert [t.get("streamed", False) for t in turns] == [False, True, False, True, False, True]
    assert [t.get("api") for t in turns] == [None] * 4 + ["responses"] * 2
    assert [t["status"] for t in turns[4:]] == ["completed", "completed"]
    assert turns[1]["completion_ids"] == turns[0]["completion_ids"]  # the stream's own tokens
    usage = rollout.usage.to_json()
    assert usage["model_calls"] == 6 and usage["output_tokens"] == 24
    assert usage["model_s"] > 0 and "incomplete_calls" not in usage
    chats = _chats(exporter)
    assert len(chats) == 6
    for span in chats:
        attributes = span.attributes or {}
        assert attributes[names.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
        assert attributes[names.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        assert str(attributes[names.GEN_AI_RESPONSE_ID]).startswith(("chatcmpl-5-0.", "resp_5-0."))
    streamed = next(s for s in chats if s.attributes[names.GEN_AI_RESPONSE_ID] == "chatcmpl-5-0.1")
    assert streamed.end_time is not None and streamed.end_time >= read_last[0]


async def test_a_policy_version_reaches_every_streamed_turn_and_span(
    serving, client, exporter
) -> None:
    simulated = SimulatedModel.build("policy", FAST)
    async with serving(simulated) as url:
        await client.post_json("policy", url + "/policy_version", {"version": 7})
        rollout = _rollout(client, url)
        sdk = rollout.async_openai()
        stream = await sdk.chat.completions.create(model="sim", messages=ARITH, stream=True)
        async for _chunk in stream:
            pass
        events = await sdk.responses.create(model="sim", input=ARITH[0]["content"], stream=True)
        async for _event in events:
            pass
    assert [t["policy_version"] for t in _model_turns(rollout)] == [7, 7]
    assert rollout.usage.policy_versions == [7, 7]
    assert [s.attributes[names.POLICY_VERSION] for s in _chats(exporter)] == [7, 7]


async def test_every_choice_is_kept_and_the_one_the_agent_used_is_the_message(client) -> None:
    async with loopback_upstream() as url:
        rollout = _rollout(client, url)
        sdk = rollout.async_openai()
        first = await sdk.chat.completions.create(
            model="m", messages=ARITH, n=2, extra_body=TOKENS, extra_headers={"x-cut": "two"}
        )
        used = first.choices[1].message.model_dump(exclude_none=True)
        followed = [*ARITH, used, {"role": "user", "content": "Are you sure?"}]
        await sdk.chat.completions.create(
            model="m", messages=followed, extra_body=TOKENS, extra_headers={"x-cut": "two"}
        )
    one, two = _model_turns(rollout)
    assert one["n"] == 2 and one["chosen"] == 1
    assert one["message"]["content"] == "Answer: 34" and one["completion_ids"] == [31, 32]
    assert one["logprobs"] == [-0.5, -0.25] and one["finish_reason"] == "stop"
    (other,) = one["other_choices"]
    assert other == {
        "index": 0,
        "message": {"role": "assistant", "content": "Answer: 33", "refusal": None},
        "finish_reason": "length",
        "completion_ids": [21, 22, 23],
        "logprobs": [-1.0, -2.0, -3.0],
    }
    # the second prompt carries the answer the agent used: its tokens extend the first turn's
    assert two["messages_start"] == 2 and two["extends_previous"] is True
    assert two["prompt_ids"] == [99] and two["chosen"] == 0  # no later turn tells: 0


async def test_an_answer_sent_back_without_its_null_fields_is_no_new_turn(serving, client) -> None:
    async with serving(SimulatedModel.build("policy", FAST)) as url:
        rollout = _rollout(client, url)
        sdk = rollout.async_openai()
        answer = await sdk.chat.completions.create(model="sim", messages=ARITH)
        again = [
            *ARITH,
            answer.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "Say it again."},
        ]
        await sdk.chat.completions.create(model="sim", messages=again)
    assert rollout.trajectory is not None
    trajectory = rollout.trajectory.to_json()
    second = _model_turns(rollout)[1]
    assert second["messages_start"] == 2 and second["messages"] == [again[2]]
    roles = [e.get("role") for e in conversation(trajectory) if e["kind"] != "verify"]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert [m["role"] for m in full_messages(trajectory)] == roles


# --- answers cut short ------------------------------------------------------------------------


def _chunk(delta: dict[str, object], finish: str | None = None, **more: object) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **more}
    body = {"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + orjson.dumps({**body, "choices": [choice]}) + b"\n\n"


async def _interrupted(request: Request) -> AsyncIterator[bytes]:
    """What llama.cpp's server streams when another request interrupts this one: what it had,
    then ``[DONE]``, and no chunk with a finish reason."""
    yield _chunk({"role": "assistant", "content": ""})
    yield _chunk({"content": "Ans"})
    yield b"data: [DONE]\n\n"


async def _closed(request: Request) -> AsyncIterator[bytes]:
    """A stream whose connection ends before ``[DONE]``."""
    yield _chunk({"role": "assistant", "content": "Ans"})


async def _miscounted(request: Request) -> AsyncIterator[bytes]:
    """A whole stream whose usage counts more tokens than arrived."""
    yield _chunk({"role": "assistant", "content": "Answer: 33"}, token_ids=[1, 2, 3])
    yield _chunk({}, "stop")
    usage = {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
    yield b"data: " + orjson.dumps({"id": "chatcmpl-cut", "choices": [], "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def _damaged(request: Request) -> AsyncIterator[bytes]:
    """A stream with an event that is not JSON in the middle (a gateway that cut a write),
    then the rest of a whole answer: its finish reason and ``[DONE]``."""
    yield _chunk({"role": "assistant", "content": "Ans"})
    yield b'data: {"id": "chatcmpl-cut", "choices": [{"delta": {"content": "wer: 3\n\n'
    yield _chunk({"content": "3"}, "stop")
    yield b"data: [DONE]\n\n"


async def _errored(request: Request) -> AsyncIterator[bytes]:
    """What vLLM streams when the engine fails mid-answer: an error event, then ``[DONE]``."""
    yield _chunk({"role": "assistant", "content": "Ans"})
    error = {"message": "engine dead", "type": "InternalServerError", "code": 500}
    yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
    yield b"data: [DONE]\n\n"


CUTS = {
    "interrupted": _interrupted,
    "closed": _closed,
    "miscounted": _miscounted,
    "damaged": _damaged,
    "errored": _errored,
}


def _two_choices(body: dict[str, Any]) -> dict[str, Any]:
    """Two different choices, with token ids and log-probabilities the way vLLM answers
    ``n: 2``; a request that carries choice 1's answer gets a prompt that extends it."""
    choices = [
        ("Answer: 33", [21, 22, 23], [-1.0, -2.0, -3.0], "length"),
        ("Answer: 34", [31, 32], [-0.5, -0.25], "stop"),
    ]
    prompt = [1, 2, 3] if len(body["messages"]) == 1 else [1, 2, 3, 31, 32, 99]
    return {
        "id": "chatcmpl-two",
        "object": "chat.completion",
        "model": "m",
        "prompt_token_ids": prompt,
        "choices": [
            {
                "index": index,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "finish_reason": finish,
                "token_ids": ids,
                "logprobs": {"content": [{"token": "t", "logprob": lp} for lp in logprobs]},
            }
            for index, (text, ids, logprobs, finish) in enumerate(choices)
        ],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": 5, "total_tokens": 11},
    }


async def _answer(request: Request) -> Response:
    kind = request.headers["x-cut"]
    if kind == "two":
        return JSONResponse(_two_choices(await request.json()))
    return StreamingResponse(CUTS[kind](request), media_type="text/event-stream")


def loopback_upstream() -> AbstractAsyncContextManager[str]:
    """An OpenAI-compatible upstream on loopback that answers as header ``x-cut`` says: a
    stream cut short one way or another, or two different choices."""
    app = Starlette(routes=[Route("/{path:path}", _answer, methods=["POST"])])
    return uvicorn_in_loop(app, lifespan="off")


@pytest.mark.parametrize(
    ("cut", "reason"),
    [
        ("interrupted", "no_finish_reason"),
        ("closed", "stream_cut"),
        ("miscounted", "usage_mismatch"),
    ],
)
async def test_a_stream_cut_short_is_recorded_as_incomplete(
    client, exporter, cut: str, reason: str
) -> None:
    async with loopback_upstream() as url:
        rollout = _rollout(client, url)
        sdk = rollout.async_openai()
        stream = await sdk.chat.completions.create(
            model="m", messages=ARITH, stream=True, extra_headers={"x-cut": cut}
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        blocking = rollout.openai()

        def read() -> None:
            chunks = blocking.chat.completions.create(
                model="m", messages=ARITH, stream=True, extra_headers={"x-cut": cut}
            )
            list(chunks)

        await asyncio.to_thread(read)
    assert text.startswith("Ans")
    turns = _model_turns(rollout)
    assert [t["incomplete"] for t in turns] == [reason, reason]
    assert all(t["streamed"] for t in turns)
    if cut == "closed":
        assert all(t["stream_incomplete"] is True for t in turns)  # the older marker kept
    assert rollout.usage.to_json()["incomplete_calls"] == 2
    assert rollout.trajectory is not None
    assert rollout.trajectory.to_json()["incomplete_calls"] == 2
    chats = _chats(exporter)
    assert [s.attributes[names.ERROR_TYPE] for s in chats] == [f"incomplete:{reason}"] * 2


@pytest.mark.parametrize(
    ("cut", "raised", "reason"),
    [("damaged", ValueError, "stream_damaged"), ("errored", openai.APIError, "stream_error")],
)
async def test_a_stream_the_sdk_raises_on_is_recorded_as_incomplete(
    client, exporter, cut: str, raised: type[Exception], reason: str
) -> None:
    """The agent's SDK raises on the bad event; an agent that catches it and goes on must not
    leave a turn that passes as whole, even though ``[DONE]`` and a finish reason followed."""
    async with loopback_upstream() as url:
        rollout = _rollout(client, url)
        stream = await rollout.async_openai().chat.completions.create(
            model="m", messages=ARITH, stream=True, extra_headers={"x-cut": cut}
        )
        with pytest.raises(raised):
            async for _chunk_read in stream:
                pass
        blocking = rollout.openai()

        def read() -> None:
            chunks = blocking.chat.completions.create(
                model="m", messages=ARITH, stream=True, extra_headers={"x-cut": cut}
            )
            with pytest.raises(raised):
                list(chunks)

        await asyncio.to_thread(read)
    turns = _model_turns(rollout)
    assert [t["incomplete"] for t in turns] == [reason, reason]
    assert rollout.usage.to_json()["incomplete_calls"] == 2
    assert [s.attributes[names.ERROR_TYPE] for s in _chats(exporter)] == [
        f"incomplete:{reason}"
    ] * 2
