"""A 5 MB model answer through the built-in single-turn agent: it comes back about that size.

A real OpenAI-compatible upstream on loopback (an aiohttp server in this test) answers every
chat completion with 5 MB of text; rollgym's ``openai`` model server proxies it to the
``single_turn`` agent, which verifies it with the ``arithmetic`` environment. The answer used to
come back five times over (26 MB, refused by the driver's 16 MiB ``run.max_response_bytes``):
the agent's ``answer``, the environment's details echoing it, and in the trajectory the model
turn, the verify turn's answer and its details again. Now the whole text travels once in the
result and once in the trajectory's model turn (the completion, which training needs whole);
every other copy is cut to a bounded size and marked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import orjson
import pytest
from aiohttp import web
from e2e_support import Job

from aiohttp_loopback import serve_on_loopback

pytestmark = pytest.mark.e2e

#: The upstream's answer text: 5 MB of ASCII lines (no escaping grows it in JSON but ``\n``).
ANSWER = ("x" * 99 + "\n") * 50_000
#: What one record may add to the answers it carries (ids, usage, the cut copies).
OVERHEAD = 256 * 1024


@pytest.fixture
def upstream() -> Iterator[str]:
    """A loopback OpenAI-compatible ``/v1/chat/completions`` answering :data:`ANSWER`."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        body = {
            "id": "chatcmpl-big",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 50_000},
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        holder["runner"], holder["port"] = await serve_on_loopback(app)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert ready.wait(30)
    try:
        yield f"http://127.0.0.1:{holder['port']}/v1"
    finally:
        runner = holder["runner"]
        assert isinstance(runner, web.AppRunner)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.mark.parametrize("trajectories", [False, True], ids=["plain", "trajectories"])
def test_a_5_mb_model_answer_comes_back_about_5_mb(
    job: Job, upstream: str, trajectories: bool
) -> None:
    servers = {
        "policy": {"kind": "model", "impl": "openai", "base_url": upstream, "model_name": "m"},
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "a": {"kind": "agent", "impl": "single_turn", "model": "policy", "environment": "arith"},
    }
    rows = [{"a": 2, "b": 3, "op": "+"}, {"a": 7, "b": 5, "op": "*"}]
    job.write(servers, rows, agent="a", concurrency=2, trajectories=trajectories)
    done = job.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert job.failures == [], job.failures
    size = len(orjson.dumps(ANSWER))  # the answer as JSON carries it
    lines = (job.out / "rollouts.jsonl").read_bytes().splitlines()
    assert len(lines) == 2
    for line in lines:
        record = orjson.loads(line)
        assert record["result"]["answer"] == ANSWER  # the agent's answer, whole
        assert size <= len(line) <= size + OVERHEAD, len(line)
    if trajectories:
        recorded = (job.out / "trajectories.jsonl").read_bytes().splitlines()
        assert len(recorded) == 2
        for line in recorded:
            turns = orjson.loads(line)["trajectory"]["turns"]
            model, verify = turns
            assert model["message"]["content"] == ANSWER  # the completion, whole
            assert verify["truncated"] is True and verify["answer_bytes"] == len(ANSWER)
            assert size <= len(line) <= size + OVERHEAD, len(line)
