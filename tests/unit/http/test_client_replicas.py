"""Balancing over replicas: least outstanding requests, session affinity, dead replicas out.

Real aiohttp servers on loopback play the replicas; each counts the requests it answered and
holds every answer until told, so "in flight" is exact rather than timed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from aiohttp_loopback import serve_on_loopback
from rollgym.errors import ConnectionRefused, RequestTimeout
from rollgym.http import replicas as replicas_module
from rollgym.http.client import HttpClient
from rollgym.http.replicas import ReplicaSet, ReplicaTable, on_replica


class Replica:
    """One replica: answers ``{"port": <its port>}``; holds answers while ``hold`` is clear."""

    def __init__(self) -> None:
        self.served = 0
        self.hold = asyncio.Event()
        self.hold.set()
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.streams = 0
        #: Streams wait here after their first event, until set.
        self.stream_hold = asyncio.Event()
        self.stream_hold.set()

    async def handle_stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``first``, then (once ``stream_hold`` is set) this replica's URL."""
        self.streams += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await self.stream_hold.wait()
        await response.write(f"data: {self.url}\n\n".encode())
        await response.write_eof()
        return response

    async def handle(self, request: web.Request) -> web.Response:
        self.served += 1
        await self.hold.wait()
        return web.json_response({"url": self.url, "path": request.path})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/stream", self.handle_stream)
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner, port = await serve_on_loopback(app)
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    started = [Replica() for _ in range(3)]
    for replica in started:
        await replica.start()
    yield started
    for replica in started:
        await replica.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_least_outstanding_then_round_robin() -> None:
    replicas = ReplicaSet(["http://a:1", "http://b:2", "http://c:3/"])
    first = [replicas.pick() for _ in range(3)]
    assert first == ["http://a:1", "http://b:2", "http://c:3"]  # idle: round-robin
    replicas.started("http://a:1")
    replicas.started("http://a:1")
    replicas.started("http://b:2")
    assert replicas.pick() == "http://c:3"  # the one with nothing in flight
    replicas.finished("http://a:1")
    replicas.finished("http://a:1")
    assert replicas.pick() == "http://a:1"


def test_a_replica_marked_down_is_skipped_until_it_comes_back() -> None:
    replicas = ReplicaSet(["http://a:1", "http://b:2"])
    replicas.mark_down("http://a:1")
    assert {replicas.pick() for _ in range(5)} == {"http://b:2"}
    replicas.mark_up("http://a:1/")
    assert {replicas.pick() for _ in range(4)} == {"http://a:1", "http://b:2"}


def test_a_held_replica_stays_out_until_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replicas_module, "RETRY_DOWN_S", 0.0)  # refused ones are retried at once
    replicas = ReplicaSet(["http://a:1", "http://b:2"])
    replicas.mark_down("http://a:1")
    replicas.hold("http://a:1/")  # the supervisor saw it die: not retried, however long
    assert {replicas.pick() for _ in range(5)} == {"http://b:2"}
    replicas.release("http://a:1")  # its restart is healthy
    assert {replicas.pick() for _ in range(4)} == {"http://a:1", "http://b:2"}
    replicas.hold("http://a:1")
    replicas.hold("http://b:2")
    assert replicas.pick() in {"http://a:1", "http://b:2"}  # all out: still an answer


def test_table_balances_only_servers_with_several_replicas() -> None:
    table = ReplicaTable({"env": ["http://a:1", "http://b:2"], "solo": ["http://s:9"]})
    assert table.for_url("http://a:1/seed_session") is not None
    assert table.for_url("http://s:9/run") is None
    assert table.containing("http://b:2/tools/x") is table.for_url("http://a:1")
    assert on_replica("http://a:1/tools/x", "http://a:1", "http://b:2") == "http://b:2/tools/x"


async def test_client_spreads_concurrent_requests_evenly(replicas: list[Replica]) -> None:
    for replica in replicas:
        replica.hold.clear()
    urls = [replica.url for replica in replicas]
    async with HttpClient(replicas={"env": urls}) as client:
        sends = [
            asyncio.ensure_future(client.post_json("env", urls[0] + "/run", {})) for _ in range(9)
        ]
        while sum(replica.served for replica in replicas) < 9:
            await asyncio.sleep(0.01)
        assert [replica.served for replica in replicas] == [3, 3, 3]
        for replica in replicas:
            replica.hold.set()
        answers = await asyncio.gather(*sends)
    assert sorted(answer.replica for answer in answers) == sorted(urls * 3)
    assert all(answer.data["url"] == answer.replica for answer in answers)


async def _outcomes(client: HttpClient, url: str, sends: int, timeout: float) -> list[str]:
    """The replica of each of ``sends`` concurrent requests, or "timeout"."""

    async def one() -> str:
        try:
            return (await client.post_json("env", url + "/run", {}, timeout=timeout)).replica or ""
        except RequestTimeout:
            return "timeout"

    return list(await asyncio.gather(*(one() for _ in range(sends))))


async def test_a_replica_that_times_out_leaves_rotation_for_the_retry(
    replicas: list[Replica],
) -> None:
    """A stopped replica (it accepts, never answers): the attempt after a timeout goes to
    the other one, not back to it (it has nothing outstanding any more: the least loaded)."""
    stuck, good = replicas[0], replicas[1]
    stuck.hold.clear()
    urls = [stuck.url, good.url]
    async with HttpClient(replicas={"env": urls}) as client:
        outcomes = [(await _outcomes(client, urls[0], 1, 0.3))[0] for _ in range(6)]
        stuck.hold.set()
    assert outcomes == ["timeout"] + [good.url] * 5


async def test_a_suspect_replica_gets_one_request_at_a_time_until_it_answers(
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replicas_module, "RETRY_DOWN_S", 0.0)  # its time out of rotation over
    stuck, good = replicas[0], replicas[1]
    stuck.hold.clear()
    urls = [stuck.url, good.url]
    async with HttpClient(replicas={"env": urls}) as client:
        assert await _outcomes(client, urls[0], 1, 0.3) == ["timeout"]
        # eight at once: least-outstanding alone would send it half of them
        burst = await _outcomes(client, urls[0], 8, 0.3)
        assert sorted(burst) == sorted(["timeout"] + [good.url] * 7)
        assert stuck.served == 2
        stuck.hold.set()  # it answers again: its probe clears it, balancing is even again
        assert await _outcomes(client, urls[0], 1, 5.0) == [stuck.url]
        target = client.replicas.for_url(urls[0])
        assert target is not None and not target.suspect
        assert sorted(await _outcomes(client, urls[0], 4, 5.0)) == sorted(urls * 2)


async def _events(response: object) -> list[str]:
    """The ``data:`` lines of an SSE answer, read to its end."""
    content = response.content  # type: ignore[attr-defined]
    return [line.decode().strip()[6:] async for line in content if line.startswith(b"data: ")]


async def test_streams_are_balanced_and_outstanding_until_they_end(
    replicas: list[Replica],
) -> None:
    urls = [replica.url for replica in replicas[:2]]
    replicas[0].stream_hold.clear()
    replicas[1].stream_hold.clear()
    async with HttpClient(replicas={"model": urls}) as client:
        target = client.replicas.for_url(urls[0])
        assert target is not None
        async with client.stream("model", urls[0] + "/stream", {}) as first:
            assert await first.content.readline() == b"data: first\n"
            async with client.stream("model", urls[0] + "/stream", {}) as second:
                assert await second.content.readline() == b"data: first\n"
                # one open stream on each replica (least outstanding), counted while open
                assert [replica.streams for replica in replicas[:2]] == [1, 1]
                assert target.outstanding == {urls[0]: 1, urls[1]: 1}
                replicas[1].stream_hold.set()
                assert await _events(second) == [urls[1]]
            # the second stream has ended: only the first, still open, counts
            assert target.outstanding == {urls[0]: 1, urls[1]: 0}
            # so plain requests go to the other replica while it lasts
            answers = [await client.post_json("model", urls[0] + "/run", {}) for _ in range(3)]
            assert {answer.replica for answer in answers} == {urls[1]}
            replicas[0].stream_hold.set()
            assert await _events(first) == [urls[0]]
        assert target.outstanding == {urls[0]: 0, urls[1]: 0}


async def test_a_refused_stream_takes_its_replica_out(
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replicas_module, "RETRY_DOWN_S", 3600.0)
    dead = f"http://127.0.0.1:{_free_port()}"
    urls = [dead, replicas[0].url]
    async with HttpClient(replicas={"model": urls}) as client:
        with pytest.raises(ConnectionRefused):
            async with client.stream("model", dead + "/stream", {}):
                pass
        target = client.replicas.for_url(dead)
        assert target is not None and dead in target.down
        for _ in range(3):
            async with client.stream("model", dead + "/stream", {}) as answer:
                assert await _events(answer) == ["first", replicas[0].url]
    assert replicas[0].streams == 3
