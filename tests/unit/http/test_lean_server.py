"""The lean request cycle answers every request byte for byte as uvicorn's own cycle does.

Two real uvicorn servers on loopback serve the same app, one with
:class:`~rollgym.http.lean_server.LeanHttpToolsProtocol`, one with uvicorn's httptools cycle
(rollgym's bounded one); raw sockets send each the same bytes (keep-alive, pipelined,
chunked, oversized, malformed, slow, HTTP/1.0, HEAD, ``Expect: 100-continue``, an app that
raises, a streamed answer) and what comes back must be the same but for the ``date`` header.
Real clients (aiohttp, rollgym's own) play a rollout's seed and verify against the
arithmetic environment on the lean protocol, and a server being shut down finishes the
answer it is writing.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import pytest
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from rollgym.builtins.envs.arithmetic import ArithmeticEnv
from rollgym.http.bounded_httptools import BoundedHttpToolsProtocol
from rollgym.http.bounded_reads import bounded_protocol, lean_cycle_supported
from rollgym.http.client import HttpClient
from rollgym.http.lean_server import LeanHttpToolsProtocol
from rollgym.http.server import create_app
from uvicorn_thread import uvicorn_in_thread
from waits import wait_for

#: The lean cycle is used, and so tested, only under a uvicorn it was written against.
pytestmark = pytest.mark.skipif(
    not lean_cycle_supported(), reason=f"the lean cycle is off under uvicorn {uvicorn.__version__}"
)

LIMIT_BYTES = 1000
#: How long a test waits for an answer: far above any real one, far below "forever".
PATIENCE_S = 30.0
DATE = re.compile(rb"\r\ndate: [^\r]*\r\n")
SESSION = re.compile(rb'"session_id":"[^"]*"')  # a fresh id from each server


def _app() -> FastAPI:
    """An arithmetic environment (rollgym's edge: body limit, error shapes, hot routes) with a
    few routes of its own that exercise what the hot routes never do."""
    app = create_app(ArithmeticEnv.build("arith", {}, max_request_bytes=LIMIT_BYTES))

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        body = await request.body()
        return PlainTextResponse(
            f"{request.method} {request.url.path} q={request.url.query} {len(body)}:".encode()
            + body
        )

    @app.get("/echo")
    async def echo_get(request: Request) -> Response:
        return PlainTextResponse(f"GET {request.url.path} q={request.url.query}")

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"part {i}\n".encode()

        return StreamingResponse(parts(), media_type="text/plain")

    @app.get("/boom")
    async def boom() -> Response:
        raise ZeroDivisionError("on purpose")

    @app.get("/cut-short")
    async def cut_short(request: Request) -> Response:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            headers = [(b"content-length", b"10")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            raise ZeroDivisionError("after the head")

        # A bare ASGI answer that raises once its head is out: the connection is closed.
        await app(request.scope, request.receive, request._send)
        return Response()  # never reached

    @app.get("/unfinished")
    async def unfinished(request: Request) -> Response:
        class Unfinished(Response):
            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                headers = [(b"content-length", b"10")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": b"12345", "more_body": True})

        return Unfinished()

    @app.get("/empty")
    async def empty() -> Response:
        return Response(status_code=204)

    return app


@contextmanager
def _served(protocol: type[asyncio.Protocol]) -> Iterator[tuple[int, uvicorn.Server]]:
    config = uvicorn.Config(_app(), log_level="critical", http=protocol, lifespan="on", ws="none")
    with uvicorn_in_thread(config) as served:
        yield served


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    with (
        _served(LeanHttpToolsProtocol) as (lean, _),
        _served(BoundedHttpToolsProtocol) as (uvicorns, _),
    ):
        yield {"lean": lean, "uvicorn": uvicorns}


def _talk(port: int, pieces: list[bytes], pause_s: float = 0.0) -> bytes:
    """Send ``pieces`` (``pause_s`` apart) and read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn:
        for i, piece in enumerate(pieces):
            if i and pause_s:
                time.sleep(pause_s)
            conn.sendall(piece)
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return SESSION.sub(b'"session_id":"-"', DATE.sub(b"\r\ndate: -\r\n", received))


def _same(ports: dict[str, int], pieces: list[bytes], pause_s: float = 0.0) -> bytes:
    lean = _talk(ports["lean"], pieces, pause_s)
    assert lean == _talk(ports["uvicorn"], pieces, pause_s)
    return lean


def _post(path: str, body: bytes, *, close: bool = False, extra: bytes = b"") -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    return (
        b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + connection + extra
        + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


SEED = b'{"rollout_id": "1-0", "task": {"a": 2, "b": 3, "op": "add"}}'


def test_kept_alive_requests_are_answered_in_order(ports: dict[str, int]) -> None:
    answer = _same(
        ports,
        [_post("/echo", b"one"), _post("/echo?x=1", b"two"), _post("/echo", b"3", close=True)],
        pause_s=0.05,
    )
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.index(b"3:one") < answer.index(b"q=x=1 3:two") < answer.index(b"1:3")


def test_pipelined_requests_are_answered_in_the_order_sent(ports: dict[str, int]) -> None:
    sent = b"".join(
        [_post("/seed_session", SEED), _post("/echo", b"second"), _post("/echo", b"x", close=True)]
    )
    answer = _same(ports, [sent])
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.index(b"session_id") < answer.index(b"6:second") < answer.index(b"1:x")


def test_a_chunked_request_body_arriving_in_pieces_is_read_whole(ports: dict[str, int]) -> None:
    head = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    answer = _same(ports, [head, b"5\r\nhello\r\n", b"6\r\n world\r\n", b"0\r\n\r\n"], pause_s=0.05)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"11:hello world")


def test_a_body_over_the_limit_is_refused_with_413(ports: dict[str, int]) -> None:
    declared = _same(ports, [_post("/seed_session", b"x" * (LIMIT_BYTES + 1), close=True)])
    assert declared.startswith(b"HTTP/1.1 413 ") and b"the limit is 1000 bytes" in declared
    chunked = _same(
        ports,
        [
            b"POST /seed_session HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n",
        ],
    )
    assert chunked.startswith(b"HTTP/1.1 413 ") and b"more than 1000 bytes" in chunked


def test_a_malformed_request_is_answered_400_and_closed(ports: dict[str, int]) -> None:
    for sent in (
        b"GARBAGE\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        assert _same(ports, [sent]).startswith(b"HTTP/1.1 400 Bad Request")


def test_a_bad_body_on_a_hot_route_gets_the_servers_400(ports: dict[str, int]) -> None:
    answer = _same(ports, [_post("/seed_session", b'{"task": 3}', close=True)])
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"field"' in answer


def test_head_get_query_and_escaped_paths(ports: dict[str, int]) -> None:
    sent = (
        b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /echo?a=1&b=%20 HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /ec%68o HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET http://x/echo?abs=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /empty HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    answer = _same(ports, [sent])
    # FastAPI's GET routes answer HEAD 405: the same from both, with no body after its head.
    assert answer.startswith(b"HTTP/1.1 405 ") and answer.count(b"HTTP/1.1 200 OK") == 4
    assert b"HTTP/1.1 204 No Content" in answer
    assert b"q=a=1&b=%20" in answer and b"GET /echo q=abs=1" in answer


def test_http_1_0_is_answered_and_closed(ports: dict[str, int]) -> None:
    answer = _same(ports, [b"GET /health HTTP/1.0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in answer


def test_an_app_that_raises_gets_a_500_and_the_connection_closed(ports: dict[str, int]) -> None:
    answer = _same(ports, [b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 500 ")


def test_an_answer_cut_short_is_closed_as_uvicorn_closes_it(ports: dict[str, int]) -> None:
    raised = _same(ports, [b"GET /cut-short HTTP/1.1\r\nHost: x\r\n\r\n"])
    assert raised.startswith(b"HTTP/1.1 200 OK") and raised.endswith(b"\r\n\r\n")
    unfinished = _same(ports, [b"GET /unfinished HTTP/1.1\r\nHost: x\r\n\r\n"])
    assert unfinished.startswith(b"HTTP/1.1 200 OK") and unfinished.endswith(b"\r\n\r\n12345")


def test_a_streamed_answer_is_chunked(ports: dict[str, int]) -> None:
    answer = _same(ports, [b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"])
    assert b"transfer-encoding: chunked" in answer and answer.endswith(
        b"7\r\npart 2\n\r\n0\r\n\r\n"
    )


def test_expect_100_continue_is_answered_before_the_body(ports: dict[str, int]) -> None:
    for name, port in ports.items():
        with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn:
            conn.sendall(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\n"
            )
            assert conn.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n", name
            conn.sendall(b"body")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
            assert answer.endswith(b"4:body"), name


def test_servers_serve_with_the_lean_cycle_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLGYM_HTTP_SERVER", raising=False)
    monkeypatch.delenv("ROLLGYM_HTTP_PARSER", raising=False)
    assert bounded_protocol() is LeanHttpToolsProtocol
    monkeypatch.setenv("ROLLGYM_HTTP_SERVER", "uvicorn")
    assert bounded_protocol() is BoundedHttpToolsProtocol


async def _rollouts_with_aiohttp(url: str, n: int) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as session:

        async def one(i: int) -> None:
            task = {"a": i, "b": 7, "op": "add"}
            async with session.post(
                url + "/seed_session", json={"rollout_id": f"{i}-0", "task": task}
            ) as seeded:
                assert seeded.status == 200
                session_id = (await seeded.json())["session_id"]
            async with session.post(
                url + "/verify", json={"session_id": session_id, "answer": f"Answer: {i + 7}"}
            ) as verdict:
                assert (await verdict.json())["reward"] == 1.0

        await asyncio.gather(*(one(i) for i in range(n)))


async def _rollouts_with_rollgyms_client(url: str, n: int) -> None:
    async with HttpClient() as client:

        async def one(i: int) -> None:
            task = {"a": i, "b": 1, "op": "add"}
            seeded = await client.post_json(
                "arith", url + "/seed_session", {"rollout_id": f"{i}-0", "task": task}
            )
            assert seeded.status == 200, seeded
            verdict = await client.post_json(
                "arith",
                url + "/verify",
                {"session_id": seeded.data["session_id"], "answer": f"Answer: {i + 1}"},
            )
            assert verdict.status == 200 and verdict.data["reward"] == 1.0

        await asyncio.gather(*(one(i) for i in range(n)))


async def test_real_clients_play_rollouts_against_the_lean_cycle(ports: dict[str, int]) -> None:
    url = f"http://127.0.0.1:{ports['lean']}"
    await _rollouts_with_aiohttp(url, 50)
    await _rollouts_with_rollgyms_client(url, 50)


def test_shutdown_finishes_the_answer_in_flight_and_closes() -> None:
    app = FastAPI()

    @app.post("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(0.5)
        return {"done": "yes"}

    config = uvicorn.Config(app, log_level="critical", http=LeanHttpToolsProtocol, ws="none")
    with (
        uvicorn_in_thread(config) as (port, server),
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn,
    ):
        conn.sendall(_post("/slow", b""))
        # until the request is in the handler's hands
        assert wait_for(lambda: server.server_state.tasks, timeout=PATIENCE_S, interval=0.005)
        server.should_exit = True
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in answer
    assert answer.endswith(b'{"done":"yes"}')


class QuickLean(LeanHttpToolsProtocol):
    read_timeout_s = 0.5


def test_one_timer_holds_both_the_keep_alive_and_the_read_deadline() -> None:
    """An idle kept-alive connection closes after keep-alive, a stalled request after the read
    limit, and a connection that keeps sending whole requests is never cut short.

    Bounds that a loaded machine cannot miss: the connection is kept busy for longer than
    both limits with requests sent right after each answer (a pause would have to outlast the
    2 s keep-alive, 40 times the 0.05 s one, to close it); the keep-alive is timed from a
    moment surely before the server armed it (the last request's send), so the close can
    only come later than that, and the read limit is told apart from a keep-alive far longer
    than the test waits, not by a narrow window."""
    keep_alive_s = 2
    with (
        uvicorn_in_thread(_quick_lean(keep_alive_s=keep_alive_s)) as (port, _),
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn,
    ):
        busy_until = time.monotonic() + keep_alive_s + QuickLean.read_timeout_s
        requests = 0
        while (sent := time.monotonic()) < busy_until or requests < 2:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200 OK"), f"cut after {requests}"
            requests += 1
            time.sleep(0.05)
        assert conn.recv(4096) == b""  # then idle: closed by the keep-alive
        assert keep_alive_s - 0.1 < time.monotonic() - sent < PATIENCE_S
    with (
        uvicorn_in_thread(_quick_lean(keep_alive_s=int(3 * PATIENCE_S))) as (port, _),
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as conn,
    ):
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200 OK")
        conn.sendall(b"GET /health HTTP/1.1\r\nHo")  # half a head: only the read limit
        assert conn.recv(4096) == b""  # closes it, long before the keep-alive would


def _quick_lean(keep_alive_s: int) -> uvicorn.Config:
    """The test app on the lean protocol with a 0.5 s read limit and the given keep-alive."""
    return uvicorn.Config(
        _app(), log_level="critical", http=QuickLean, ws="none", timeout_keep_alive=keep_alive_s
    )


ARITH = [{"role": "user", "content": "Compute: 2 + 3\nReply with 'Answer: <number>'."}]


async def _sdk_answers(url: str) -> tuple[str | None, str]:
    """One chat completion and one streamed, through the official OpenAI SDK."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk:
        whole = await sdk.chat.completions.create(model="sim", messages=ARITH)
        stream = await sdk.chat.completions.create(
            model="sim",
            messages=ARITH,
            stream=True,
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    return whole.choices[0].message.content, streamed


async def test_the_openai_sdk_gets_the_same_answers_from_the_model_server() -> None:
    from rollgym.builtins.models.simulated import SimulatedModel

    fast = {"accuracy": 1.0, "latency": {"kind": "fixed", "seconds": 0.0}}
    answers = []
    for protocol in (LeanHttpToolsProtocol, BoundedHttpToolsProtocol):
        app = create_app(SimulatedModel.build("policy", fast))
        config = uvicorn.Config(app, log_level="critical", http=protocol, lifespan="on", ws="none")
        with uvicorn_in_thread(config) as (port, _):
            answers.append(await _sdk_answers(f"http://127.0.0.1:{port}"))
    assert answers[0] == answers[1]
    assert answers[0][0] is not None and "Answer: 5" in answers[0][0]
    assert "Answer: 5" in answers[0][1]
