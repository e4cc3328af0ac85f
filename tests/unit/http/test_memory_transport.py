"""The client's own rules over the in-memory transport (no socket), and which transport a URL takes.

``HttpClient(transport=MemoryTransport(handler))`` runs everything above the transport as for
real: JSON, limits, redirects, time limits, the error boundary, replicas. The real transports
(lean, aiohttp) are tested against loopback servers in ``test_lean_client.py``,
``test_client_limits.py`` and ``test_client_aiohttp_on_demand.py``.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rollgym.driver.dispatch import transport_failure
from rollgym.errors import ConnectError, ConnectionRefused, ExchangeRefused, RequestTimeout
from rollgym.http import lean
from rollgym.http import replicas as replicas_module
from rollgym.http.aiohttp_transport import AiohttpTransport
from rollgym.http.client import HttpClient
from rollgym.http.lean_transport import LeanTransport
from rollgym.http.limits import ExchangeLimits
from rollgym.http.memory import MemoryTransport, json_answer
from rollgym.http.transport import Answer, Request


def _echo(request: Request) -> Answer:
    body = None if request.body is None else orjson.loads(request.body)
    return json_answer({"method": request.method, "url": request.url, "got": body})


async def test_a_json_exchange_goes_to_the_handler_and_back() -> None:
    memory = MemoryTransport(_echo)
    async with HttpClient(transport=memory) as client:
        answer = await client.post_json("env", "http://env:9/verify", {"q": 7}, headers={"A": "b"})
        got = await client.get_json("env", "http://env:9/health")
    assert answer.status == 200 and answer.data["got"] == {"q": 7}
    assert got.data == {"method": "GET", "url": "http://env:9/health", "got": None}
    sent = memory.requests[0]
    assert sent.headers == {"Content-Type": "application/json", "A": "b"}
    assert answer.headers is not None and answer.headers.get("CONTENT-TYPE") == "application/json"


async def test_a_non_json_answer_keeps_a_snippet_of_its_text() -> None:
    async with HttpClient(
        transport=MemoryTransport(lambda r: Answer(502, {}, b"bad gateway"))
    ) as c:
        answer = await c.post_json("model", "http://m/v1/chat/completions", {})
    assert (answer.status, answer.data, answer.text) == (502, None, "bad gateway")


async def test_a_request_over_the_limit_is_refused_unsent() -> None:
    memory = MemoryTransport(_echo)
    limits = ExchangeLimits(max_request_bytes=4096)
    async with HttpClient(transport=memory, limits=limits) as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("solver", "http://s/run", {"blob": "b" * 10_000})
        await client.post_json("solver", "http://s/run", {"blob": "small"})
    assert caught.value.kind == "request_too_large" and "(POST /run)" in str(caught.value)
    assert "run.max_request_bytes" in str(caught.value) and "not sent" in str(caught.value)
    assert len(memory.requests) == 1  # only the small one was sent


async def test_an_answer_over_the_limit_is_refused_naming_the_key() -> None:
    big = json_answer({"pad": "z" * 5000})
    limits = ExchangeLimits(max_response_bytes=1000)
    async with HttpClient(transport=MemoryTransport(lambda r: big), limits=limits) as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("solver", "http://s/run", {})
    assert caught.value.kind == "response_too_large"
    assert "'solver' (POST /run) is 5010 bytes" in str(caught.value)
    assert "run.max_response_bytes" in str(caught.value)


async def test_a_handler_that_never_answers_times_out() -> None:
    async def hang(request: Request) -> Answer:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with HttpClient(transport=MemoryTransport(hang)) as client:
        with pytest.raises(RequestTimeout, match=r"no answer from 'agent' within 0.2s \(POST /run"):
            await client.post_json("agent", "http://a/run", {}, timeout=0.2)


@pytest.mark.parametrize(
    ("failure", "error"),
    [(ConnectionRefusedError(111, "refused"), ConnectionRefused), (OSError(5, "io"), ConnectError)],
)
async def test_a_failed_send_is_a_transport_error_naming_the_server(
    failure: OSError, error: type[ConnectError]
) -> None:
    def fail(request: Request) -> Answer:
        raise failure

    async with HttpClient(transport=MemoryTransport(fail)) as client:
        with pytest.raises(error) as caught:
            await client.post_json("solver", "http://u:secret@s/run", {})
    assert type(caught.value) is error and caught.value.server == "solver"
    assert str(caught.value).startswith("cannot reach 'solver' (POST /run): ")
    assert "secret" not in str(caught.value)


def _redirecting(location: str, status: int = 307) -> MemoryTransport:
    """Redirects ``/run`` to ``location``; echoes anything else."""

    def answer(request: Request) -> Answer:
        if request.url.endswith("/run"):
            return Answer(status, {"Location": location}, b"")
        return _echo(request)

    return MemoryTransport(answer)


async def test_a_same_host_redirect_is_followed_with_its_body() -> None:
    memory = _redirecting("/v2/go")
    async with HttpClient(transport=memory) as client:
        answer = await client.post_json("solver", "http://s:1/run", {"q": 7})
    assert answer.data == {"method": "POST", "url": "http://s:1/v2/go", "got": {"q": 7}}
    assert [r.url for r in memory.requests] == ["http://s:1/run", "http://s:1/v2/go"]


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_post_redirected_by_301_302_303_becomes_a_get_without_body(status: int) -> None:
    async with HttpClient(transport=_redirecting("/v2/go", status)) as client:
        answer = await client.post_json("solver", "http://s:1/run", {"q": 7})
    assert answer.data == {"method": "GET", "url": "http://s:1/v2/go", "got": None}


async def test_a_redirect_to_another_host_is_refused_not_followed() -> None:
    memory = _redirecting("http://other:2/steal", 302)
    async with HttpClient(transport=memory) as client:
        with pytest.raises(ExchangeRefused) as caught:
            await client.post_json("solver", "http://u:pw@s:1/run", {})
    message = str(caught.value)
    assert caught.value.kind == "redirect_refused"
    assert message.startswith("redirect to another host refused: 'solver' answered HTTP 302")
    assert "http://other:2/steal" in message and "pw" not in message
    assert len(memory.requests) == 1  # nothing went to the other host


async def test_a_same_host_redirect_loop_is_bounded() -> None:
    memory = _redirecting("/run")
    async with HttpClient(transport=memory) as client:
        with pytest.raises(ExchangeRefused, match="more than 5 times"):
            await client.post_json("solver", "http://s:1/run", {})
    assert len(memory.requests) == 6


async def test_replicas_balance_pin_and_drop_a_refusing_one_without_sockets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replicas_module, "RETRY_DOWN_S", 3600.0)  # no retry of it in this test
    urls = ["http://r0:1", "http://dead:2", "http://r2:3"]

    def serve(request: Request) -> Answer:
        if request.url.startswith("http://dead:2"):
            raise ConnectionRefusedError(111, "refused")
        return _echo(request)

    async with HttpClient(transport=MemoryTransport(serve), replicas={"env": urls}) as client:
        pinned = [await client.post_json("env", urls[2] + "/t", {}, pinned=True) for _ in range(3)]
        outcomes = []
        for _ in range(6):
            try:
                outcomes.append((await client.post_json("env", urls[0] + "/run", {})).replica)
            except ConnectionRefused as exc:
                failure = transport_failure(exc)
                assert failure.transient and failure.kind == "connection_error"
                outcomes.append("refused")
        target = client.replicas.for_url(urls[0])
        assert target is not None and urls[1] in target.down
    assert {answer.replica for answer in pinned} == {urls[2]}
    assert outcomes.count("refused") == 1  # its first pick, then out of rotation
    assert set(outcomes) - {"refused"} == {urls[0], urls[2]}


async def test_the_chooser_sends_each_url_the_way_it_did(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, tls, credentials = "http://127.0.0.1:1/run", "https://api.x/v1", "http://u:p@h:1/run"
    async with HttpClient() as client:
        assert isinstance(client.transport_for(plain), LeanTransport)
        assert isinstance(client.transport_for(tls), AiohttpTransport)
        assert isinstance(client.transport_for(credentials), AiohttpTransport)
        assert not client.transport_for(tls).opened  # type: ignore[attr-defined]
    monkeypatch.setenv(lean.ENV_CLIENT, "aiohttp")
    async with HttpClient() as client:
        assert isinstance(client.transport_for(plain), AiohttpTransport)
    memory = MemoryTransport(_echo)
    async with HttpClient(transport=memory) as client:
        assert {client.transport_for(url) is memory for url in (plain, tls, credentials)} == {True}


async def test_a_client_used_before_start_says_so() -> None:
    client = HttpClient(transport=MemoryTransport(_echo))
    with pytest.raises(RuntimeError, match="before start"):
        await client.post_json("env", "http://e/run", {})
