"""The ``openai`` proxy against real upstreams on loopback: the paths RL users take on vLLM.

- An abandoned call stops at the upstream: the proxy, served by rollgym's own protocol, is
  called and its caller gives up; the upstream (a bare asyncio server that never answers, or
  starts a stream and stalls) must see its connection closed, streamed or not.
- ``request_id: auto`` decides on its first call: 16 concurrent first calls against an
  upstream that refuses every id but a UUID are refused once, not 16 times.
- ``/v1/completions`` (text and token-id prompts, streamed or not), ``/tokenize`` and
  ``/detokenize`` reach the upstream with the rollout's request id and come back stamped with
  the policy version and with the upstream's own headers (hop-by-hop ones dropped).
- A Responses call carries its id in the body for vLLM; an upstream that refuses the field
  gets the call again without it, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse
from test_openai_upstream import ARITH, FAST, UuidOnlyUpstream

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.errors import RequestTimeout
from rollgym.http.bounded_reads import bounded_protocol
from rollgym.http.client import HttpClient
from rollgym.http.server import OrjsonResponse, create_app
from rollgym.servers.base import Server
from rollgym.servers.request_ids import is_uuid
from uvicorn_thread import uvicorn_in_loop

#: How long a test waits for something that should happen: generous for a loaded machine.
PATIENCE_S = 30.0


def _served(server: Server) -> AbstractAsyncContextManager[str]:
    """``server``'s app under uvicorn with rollgym's own protocol (what its processes run)."""
    return uvicorn_in_loop(create_app(server), PATIENCE_S, http=bounded_protocol(), lifespan="on")


class BareUpstream:
    """A bare asyncio HTTP server on loopback (no framework to buffer or end what it sends):
    ``async with`` it for its URL; each connection runs :meth:`_serve`."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


async def read_request(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One request's JSON body (its head read up to ``Content-Length``)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body: dict[str, Any] = orjson.loads(await reader.readexactly(length))
    return body


class StallingUpstream(BareUpstream):
    """A bare HTTP upstream on loopback that reads a request and never finishes its answer
    (for a streamed request it sends the head and one event first). Counts requests it
    received and connections its clients closed."""

    def __init__(self) -> None:
        super().__init__()
        self.received = 0
        self.closed = 0
        self.changed = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        self.received += 1
        self.changed.set()
        if body.get("stream"):
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            event = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
        # wait for the client to close (EOF): the engine's view of an abort
        while await reader.read(65536):
            pass
        self.closed += 1
        self.changed.set()
        writer.close()

    async def wait_until(self, check: Callable[[], bool]) -> bool:
        async with asyncio.timeout(PATIENCE_S):
            while not check():
                self.changed.clear()
                await self.changed.wait()
        return True


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_an_abandoned_call_closes_its_upstream_connection(stream: bool, api: str) -> None:
    upstream = StallingUpstream()
    async with upstream as upstream_url:
        proxy = OpenAIUpstream.build(
            "proxy", {"base_url": upstream_url + "/v1", "model_name": "m", "request_id": "header"}
        )
        async with _served(proxy) as url, HttpClient() as client:
            route, body = (
                ("/r/5-0/v1/chat/completions", {"messages": ARITH})
                if api == "chat"
                else ("/r/5-0/v1/completions", {"prompt": [1, 2, 3]})
            )
            calling = asyncio.create_task(
                client.post_json("proxy", url + route, {**body, "stream": stream}, timeout=None)
            )
            await upstream.wait_until(lambda: upstream.received == 1)
            if stream:
                # the stream started (the proxy answers once the first event is through)
                await asyncio.sleep(0.2)
            calling.cancel()  # the caller gives up: its connection to the proxy closes
            with pytest.raises(asyncio.CancelledError):
                await calling
            assert await upstream.wait_until(lambda: upstream.closed == 1)


async def test_a_timed_out_caller_closes_the_upstream_connection() -> None:
    """The same through a time limit (the driver's ``run.timeout_s`` is one)."""
    upstream = StallingUpstream()
    async with upstream as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with _served(proxy) as url, HttpClient() as client:
            with pytest.raises(RequestTimeout):
                await client.post_json(
                    "proxy", url + "/v1/chat/completions", {"messages": ARITH}, timeout=0.5
                )
            assert await upstream.wait_until(lambda: upstream.closed == 1)


async def test_auto_request_ids_are_decided_by_the_first_call() -> None:
    upstream = UuidOnlyUpstream.build("engine", FAST)
    async with _served(upstream) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with _served(proxy) as url, HttpClient() as client:
            answers = await asyncio.gather(
                *(
                    client.post_json(
                        "proxy",
                        url + "/v1/chat/completions",
                        {"messages": ARITH},
                        headers={"X-Request-Id": f"{i}-0.0"},
                        timeout=PATIENCE_S,
                    )
                    for i in range(16)
                )
            )
    assert [a.status for a in answers] == [200] * 16
    refused = [seen for seen in upstream.seen if not is_uuid(seen or "")]
    assert len(refused) == 1, upstream.seen  # one call decided, the other 15 waited for it
    assert len(upstream.seen) == 17
    assert isinstance(proxy, OpenAIUpstream) and proxy.id_policy == "uuid"


class CompletionsUpstream(Server):
    """An engine with vLLM's legacy completions, tokenizer routes and answer headers; records
    what reached it."""

    kind = "model"
    refuse_body_ids = False

    def add_routes(self, app: FastAPI) -> None:
        self.seen: list[tuple[str, str | None, dict[str, Any]]] = []
        refuse_body_ids = self.refuse_body_ids

        def _headers(request_id: str | None) -> dict[str, str]:
            # vLLM answers its request id; the others must not pass the proxy
            return {"x-request-id": request_id or "", "keep-alive": "timeout=5", "x-engine": "e"}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            body = orjson.loads(await request.body())
            request_id = request.headers.get("x-request-id")
            self.seen.append(("/v1/completions", request_id, body))
            answer = {
                "id": f"cmpl-{request_id}",
                "object": "text_completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {"index": 0, "text": " four", "logprobs": None, "finish_reason": "length"}
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
            if not body.get("stream"):
                return OrjsonResponse(answer, headers=_headers(request_id))

            async def events() -> AsyncIterator[bytes]:
                chunk = {**answer, "usage": None}
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                usage = {**answer, "choices": [], "usage": answer["usage"]}
                yield b"data: " + orjson.dumps(usage) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(
                events(), media_type="text/event-stream", headers=_headers(request_id)
            )

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Response:
            body = orjson.loads(await request.body())
            self.seen.append(("/tokenize", None, body))
            return OrjsonResponse({"tokens": [1, 2], "count": 2, "max_model_len": 64})

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            body = orjson.loads(await request.body())
            self.seen.append(("/v1/responses", request.headers.get("x-request-id"), body))
            if refuse_body_ids and "request_id" in body:
                error = {"message": "Unknown parameter: 'request_id'.", "param": "request_id"}
                return OrjsonResponse({"error": error}, status_code=400)
            return OrjsonResponse({"id": body.get("request_id", "resp_x"), "object": "response"})


class BodyIdRefusingUpstream(CompletionsUpstream):
    """Refuses a ``request_id`` field in a Responses body, as OpenAI's API does."""

    refuse_body_ids = True


async def test_completions_are_forwarded_attributed_stamped_with_the_engines_headers() -> None:
    upstream = CompletionsUpstream.build("engine", {})
    async with _served(upstream) as upstream_url:
        proxy = OpenAIUpstream.build(
            "proxy",
            {"base_url": upstream_url + "/v1", "model_name": "served", "request_id": "header"},
        )
        async with _served(proxy) as url, HttpClient() as client:
            await client.post_json("proxy", url + "/policy_version", {"version": 7})
            text = await client.post_json(
                "proxy", url + "/r/6-0/v1/completions", {"prompt": "2 + 2 =", "max_tokens": 1}
            )
            ids = await client.post_json(
                "proxy",
                url + "/v1/completions",
                {"prompt": [[1, 2, 3]], "max_tokens": 1},
                headers={"X-Request-Id": "6-1.4"},
            )
            async with client.stream(
                "proxy", url + "/r/6-2/v1/completions", {"prompt": [1, 2], "stream": True}
            ) as streamed:
                lines = [line async for line in streamed.content if line.strip()]
                stream_headers = dict(streamed.headers)
            bad = await client.post_json("proxy", url + "/v1/completions", {"max_tokens": 1})
    assert text.status == ids.status == 200, (text.data, ids.data)
    assert [(route, rid) for route, rid, _ in upstream.seen] == [
        ("/v1/completions", "6-0.0"),
        ("/v1/completions", "6-1.4"),
        ("/v1/completions", "6-2.0"),
    ]
    assert upstream.seen[1][2]["prompt"] == [[1, 2, 3]] and upstream.seen[0][2]["model"] == "served"
    assert text.data["id"] == "cmpl-6-0.0" and text.data["choices"][0]["text"] == " four"
    assert text.data["policy_version"] == 7
    assert text.headers is not None
    assert text.headers.get("x-request-id") == "6-0.0" and text.headers.get("x-engine") == "e"
    assert text.headers.get("keep-alive") is None  # hop-by-hop: not passed on
    assert text.headers.get("server-timing", "").startswith("engine;dur=")  # the proxy's own
    # streamed: the text event and [DONE]; the usage chunk the proxy asked for is dropped
    assert lines[0].startswith(b"data: ") and b'" four"' in lines[0]
    assert lines[-1] == b"data: [DONE]\n" and len(lines) == 2
    assert {k.lower(): v for k, v in stream_headers.items()}["x-request-id"] == "6-2.0"
    assert upstream.seen[2][2]["stream_options"] == {"include_usage": True}
    assert bad.status == 400 and "prompt" in bad.data["error"]["message"]


async def test_tokenize_is_passed_on_and_a_missing_route_is_one_line() -> None:
    upstream = CompletionsUpstream.build("engine", {})
    async with _served(upstream) as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with _served(proxy) as url, HttpClient() as client:
            tokens = await client.post_json("proxy", url + "/tokenize", {"prompt": "hi"})
            missing = await client.post_json("proxy", url + "/detokenize", {"tokens": [1]})
    assert tokens.status == 200 and tokens.data["tokens"] == [1, 2]
    assert upstream.seen == [("/tokenize", None, {"prompt": "hi", "model": "m"})]
    assert missing.status == 501
    message = missing.data["error"]["message"]
    assert message == "the upstream model server has no /detokenize (it answered HTTP 404)"


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
async def test_a_responses_call_carries_its_id_in_the_body_unless_refused(stream: bool) -> None:
    takes = CompletionsUpstream.build("engine", {})
    refuses = BodyIdRefusingUpstream.build("other", {})
    async with _served(takes) as takes_url, _served(refuses) as refuses_url:
        results = []
        for upstream_url in (takes_url, refuses_url):
            options = {"base_url": upstream_url + "/v1", "model_name": "m", "request_id": "header"}
            proxy = OpenAIUpstream.build("proxy", options)
            async with _served(proxy) as url, HttpClient() as client:
                for _ in range(2):
                    answer = await client.post_json(
                        "proxy", url + "/r/7-0/v1/responses", {"input": "hi", "stream": stream}
                    )
                    results.append(answer.status)
            assert isinstance(proxy, OpenAIUpstream)
            results.append(proxy.body_ids)
    sent = [(body.get("request_id"), rid) for _, rid, body in takes.seen]
    assert sent == [("resp_7-0.0", "7-0.0"), ("resp_7-0.1", "7-0.1")]
    # refused once with the field, sent again without it; the next call never carries it
    refused = [(body.get("request_id"), rid) for _, rid, body in refuses.seen]
    assert refused == [("resp_7-0.0", "7-0.0"), (None, "7-0.0"), (None, "7-0.1")]
    assert results == [200, 200, None, 200, 200, False]


async def test_the_simulated_model_answers_completions_as_vllm_does() -> None:
    simulated = SimulatedModel.build("engine", FAST)
    async with _served(simulated) as url, HttpClient() as client:
        text = await client.post_json(
            "engine", url + "/r/8-0/v1/completions", {"prompt": "Compute: 2 + 2"}
        )
        ids = await client.post_json(
            "engine",
            url + "/v1/completions",
            {"prompt": [3, 4, 5, 6]},
            headers={"X-Request-Id": "8-1.2"},
        )
        async with client.stream(
            "engine",
            url + "/r/8-2/v1/completions",
            {"prompt": "Compute: 2 + 2", "stream": True, "stream_options": {"include_usage": True}},
        ) as streamed:
            events = [
                orjson.loads(line[6:])
                async for line in streamed.content
                if line.startswith(b"data: {")
            ]
        batch = await client.post_json("engine", url + "/v1/completions", {"prompt": [[1], [2]]})
    assert text.status == 200, text.data
    assert text.data["id"] == "cmpl-8-0.0" and text.data["object"] == "text_completion"
    choice = text.data["choices"][0]
    assert set(choice) == {  # vLLM's CompletionResponseChoice, every field (nulls included)
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "prompt_logprobs",
        "prompt_token_ids",
        "routed_experts",
    }
    assert choice["text"] == "Answer: 4" and choice["finish_reason"] == "stop"
    assert ids.status == 200 and ids.data["id"] == "cmpl-8-1.2"
    assert ids.data["usage"]["prompt_tokens"] == 4
    assert [e["object"] for e in events] == ["text_completion"] * 2
    assert events[0]["choices"][0]["text"] == "Answer: 4" and events[1]["usage"]["total_tokens"]
    assert batch.status == 400 and "one prompt a request" in batch.data["error"]["message"]


class FloodingUpstream(BareUpstream):
    """An upstream that streams :data:`FLOOD_EVENTS` events as fast as the socket takes them,
    as vLLM does with several generations at once; says whether its client closed before the
    last one (``cut_short``) or it sent them all (``finished``)."""

    FLOOD_EVENTS = 300_000

    def __init__(self) -> None:
        super().__init__()
        self.cut_short = asyncio.Event()
        self.finished = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        event = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        chunk = b"%x\r\n%b\r\n" % (len(event) * 32, event * 32)
        try:
            for _ in range(self.FLOOD_EVENTS // 32):
                writer.write(chunk)
                await writer.drain()
                if writer.is_closing() or reader.at_eof():
                    self.cut_short.set()
                    return
        except ConnectionError:
            self.cut_short.set()
            return
        finally:
            writer.close()
        self.finished.set()


async def test_a_caller_that_gives_up_on_a_flooding_stream_stops_it_at_the_upstream() -> None:
    """The proxy relays a stream faster than it can end it: reading a buffered line and
    writing it on do not suspend, so without a return to the event loop every few lines the
    proxy never saw its caller's close, and the engine streamed on to the end (on vLLM: the
    given-up generations ran to their length)."""
    upstream = FloodingUpstream()
    async with upstream as upstream_url:
        proxy = OpenAIUpstream.build("proxy", {"base_url": upstream_url + "/v1", "model_name": "m"})
        async with _served(proxy) as url, HttpClient() as client:

            async def read_a_little() -> None:
                async with client.stream(
                    "proxy", url + "/v1/chat/completions", {"messages": ARITH, "stream": True}
                ) as streamed:
                    await streamed.content.readline()
                    await asyncio.sleep(3600)  # gives up (below) while the flood goes on

            reading = asyncio.create_task(read_a_little())
            await asyncio.sleep(0.3)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            ended = asyncio.create_task(upstream.cut_short.wait())
            done = asyncio.create_task(upstream.finished.wait())
            await asyncio.wait({ended, done}, timeout=PATIENCE_S, return_when="FIRST_COMPLETED")
            ended.cancel(), done.cancel()
            assert upstream.cut_short.is_set() and not upstream.finished.is_set()
