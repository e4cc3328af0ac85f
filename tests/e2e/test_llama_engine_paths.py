"""The ``openai`` proxy in front of llama.cpp's server (llama-cpp-python), in-process on
loopback: ``request_id: auto`` decides on its first call, ``/v1/completions`` is forwarded,
and ``/tokenize`` (which llama.cpp's server does not have) is one clear line.

llama.cpp's server refuses any ``X-Request-Id`` that is not a UUID with an empty 400, so it
is the real case of ``auto``: 16 concurrent first calls must cost one refusal, not 16. What
reaches the engine is read on the proxy's own client (each call it sends, with the id it
carries), beside the engine's answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from engine_support import llama_server
from tiny_gguf import write_tiny_llama

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.http.bounded_reads import bounded_protocol
from rollgym.http.client import HttpClient
from rollgym.http.server import create_app
from rollgym.servers.request_ids import is_uuid
from rollgym.servers.server_process import bind_loopback

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python[server] is not installed (scripts/test.sh)"
)

pytestmark = pytest.mark.e2e
PATIENCE_S = 300.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("llama")
    with llama_server(folder, write_tiny_llama(folder / "tiny.gguf")) as url:
        yield url


@asynccontextmanager
async def _proxy(engine: str) -> AsyncIterator[tuple[str, OpenAIUpstream, list[str | None]]]:
    """The proxy served by rollgym's protocol; the request ids of every call it sent."""
    proxy = OpenAIUpstream.build("proxy", {"base_url": engine + "/v1", "model_name": "tiny"})
    assert isinstance(proxy, OpenAIUpstream)
    sent: list[str | None] = []
    sock = bind_loopback()
    config = uvicorn.Config(
        create_app(proxy), http=bounded_protocol(), log_level="warning", lifespan="on"
    )
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv._serve(sockets=[sock]))
    try:
        while not uv.started:
            assert not task.done(), "the proxy did not start"
            await asyncio.sleep(0.01)
        real = proxy.client.post_json

        def recording(*args: Any, **options: Any) -> Any:
            sent.append((options.get("headers") or {}).get("X-Request-Id"))
            return real(*args, **options)

        proxy.client.post_json = recording  # type: ignore[method-assign]
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", proxy, sent
    finally:
        uv.should_exit = True
        await asyncio.wait_for(task, 60)
        sock.close()


async def _first_calls(engine: str) -> tuple[list[int], list[str | None], str]:
    async with _proxy(engine) as (url, proxy, sent), HttpClient() as client:
        answers = await asyncio.gather(
            *(
                client.post_json(
                    "proxy",
                    url + f"/r/{i}-0/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                    timeout=PATIENCE_S,
                )
                for i in range(16)
            )
        )
        return [a.status for a in answers], sent, proxy.id_policy


def test_auto_request_ids_cost_one_refusal_on_llama_cpp(engine: str) -> None:
    statuses, sent, policy = asyncio.run(_first_calls(engine))
    assert statuses == [200] * 16
    assert policy == "uuid"
    refused = [rid for rid in sent if not is_uuid(rid or "")]
    assert len(refused) == 1, sent  # the one deciding call's header; the others waited
    assert len(sent) == 17


async def _completions_and_tokenize(engine: str) -> tuple[Any, Any]:
    async with _proxy(engine) as (url, _, _), HttpClient() as client:
        text = await client.post_json(
            "proxy",
            url + "/r/1-0/v1/completions",
            {"prompt": "one two", "max_tokens": 3},
            timeout=PATIENCE_S,
        )
        tokens = await client.post_json("proxy", url + "/tokenize", {"prompt": "hi"})
    return text, tokens


def test_completions_are_forwarded_and_a_missing_tokenize_is_one_line(
    engine: str, tmp_path: Path
) -> None:
    text, tokens = asyncio.run(_completions_and_tokenize(engine))
    assert text.status == 200, text.data
    assert text.data["object"] == "text_completion" and text.data["choices"][0]["text"] is not None
    assert text.data["usage"]["completion_tokens"] >= 1
    assert tokens.status == 501
    message = tokens.data["error"]["message"]
    assert message.startswith("the upstream model server has no /tokenize (it answered HTTP 4")
