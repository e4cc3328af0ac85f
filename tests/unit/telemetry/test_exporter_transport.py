"""The exporter child's plain-HTTP transport against real servers on loopback, and its choice.

``PlainHttp`` must answer as requests did for the child's retry rules: a status, ``NoAnswer``
only once the request went out whole (the backend may store it), ``NotSent`` when nothing
arrived; a kept-alive connection the backend closed is not a failure. requests stays in charge
of everything plain HTTP does not cover (TLS, proxies, netrc).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rollgym.telemetry.pipeline import child
from rollgym.telemetry.pipeline.transport import (
    NoAnswer,
    NotSent,
    PlainHttp,
    RequestsHttp,
    plain_http_will_do,
    transport_for,
)

HEADERS = {"Content-Type": "application/x-protobuf"}
TIMEOUT = (2.0, 2.0)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the trace store answers

    def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
        server: _Server = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server.bodies.append((self.path, self.headers.get("Content-Type"), body))
        server.peers.add(self.client_address)
        if server.delay_s:
            time.sleep(server.delay_s)
        self.send_response(server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if server.close_after:
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[tuple[str, str | None, bytes]] = []
        self.peers: set[tuple[str, int]] = set()
        self.status = 200
        self.delay_s = 0.0
        self.close_after = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_posts_go_out_whole_on_one_kept_alive_connection(server: _Server) -> None:
    transport = PlainHttp(server.url, HEADERS)
    for n in range(3):
        assert transport.post(b"body-%d" % n, TIMEOUT) == 200
    assert [b for _, _, b in server.bodies] == [b"body-0", b"body-1", b"body-2"]
    assert {(path, kind) for path, kind, _ in server.bodies} == {
        ("/v1/traces", "application/x-protobuf")
    }
    assert len(server.peers) == 1  # one connection for all three


def test_a_connection_the_backend_closed_is_opened_again(server: _Server) -> None:
    server.close_after = True
    transport = PlainHttp(server.url, HEADERS)
    assert [transport.post(b"x", TIMEOUT) for _ in range(3)] == [200, 200, 200]
    assert len(server.bodies) == 3


def test_a_stale_kept_alive_connection_is_resent_once_at_once(server: _Server) -> None:
    transport = PlainHttp(server.url, HEADERS)
    assert transport.post(b"first", TIMEOUT) == 200
    connection = transport._connection
    assert connection is not None and connection.sock is not None
    connection.sock.shutdown(socket.SHUT_RDWR)  # what an idle timeout on the backend leaves
    assert transport.post(b"second", TIMEOUT) == 200
    assert [b for _, _, b in server.bodies] == [b"first", b"second"]


def test_the_status_is_the_backends(server: _Server) -> None:
    server.status = 503
    assert PlainHttp(server.url, HEADERS).post(b"x", TIMEOUT) == 503


def test_no_answer_in_time_is_no_answer_not_a_failure(server: _Server) -> None:
    server.delay_s = 1.0
    with pytest.raises(NoAnswer):
        PlainHttp(server.url, HEADERS).post(b"x", (1.0, 0.2))
    assert server.bodies  # it arrived: the backend may store it


def test_a_port_nobody_listens_on_is_not_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(NotSent):
        PlainHttp(f"http://127.0.0.1:{port}/v1/traces", HEADERS).post(b"x", (0.5, 0.5))


def test_the_poster_retries_a_5xx_then_delivers(server: _Server) -> None:
    server.status = 503
    poster = child.Poster(server.url, {}, 2.0, None, patience_s=3.0)
    threading.Timer(0.2, lambda: setattr(server, "status", 200)).start()
    assert poster.post(b"x") == child.OK
    assert len(server.bodies) >= 2


@pytest.fixture
def no_netrc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_requests_sends_the_endpoints_headers_too(server: _Server, no_netrc: Path) -> None:
    assert RequestsHttp(server.url, HEADERS).post(b"x", TIMEOUT) == 200
    assert server.bodies == [("/v1/traces", "application/x-protobuf", b"x")]


def test_plain_http_with_nothing_else_set_takes_the_plain_path(no_netrc: Path) -> None:
    assert plain_http_will_do("http://127.0.0.1:4318/v1/traces")
    assert isinstance(transport_for("http://127.0.0.1:4318/v1/traces", HEADERS), PlainHttp)


@pytest.mark.parametrize(
    ("url", "env"),
    [
        ("https://collector.example/v1/traces", {}),
        ("http://user:secret@collector.example/v1/traces", {}),  # requests sends basic auth
        ("http://collector.example/v1/traces", {"HTTP_PROXY": "http://proxy.example:3128"}),
        ("http://collector.example/v1/traces", {"all_proxy": "http://proxy.example:3128"}),
    ],
)
def test_tls_proxies_and_url_credentials_stay_with_requests(
    no_netrc: Path, monkeypatch: pytest.MonkeyPatch, url: str, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert not plain_http_will_do(url)
    assert isinstance(transport_for(url, HEADERS), RequestsHttp)


def test_a_netrc_file_stays_with_requests(no_netrc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (no_netrc / ".netrc").write_text("machine collector.example login a password b\n")
    assert not plain_http_will_do("http://collector.example/v1/traces")
    elsewhere = no_netrc / "elsewhere"
    monkeypatch.setenv("NETRC", str(elsewhere))  # NETRC names the one file requests reads
    assert plain_http_will_do("http://collector.example/v1/traces")
    elsewhere.write_text("machine collector.example login a password b\n")
    assert not plain_http_will_do("http://collector.example/v1/traces")
