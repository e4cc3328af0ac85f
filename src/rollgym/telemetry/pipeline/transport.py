"""How the exporter child sends one OTLP request: the standard library's HTTP client, or requests.

Why two: requests (with urllib3 and charset_normalizer) cost the exporter child about 0.15 s of
CPU to import at every start, and about 2.2 ms of CPU a post (its session, adapter and
connection-pool layers) where ``http.client`` on one kept-alive connection costs 0.7 ms,
measured on the development machine with 512-span requests to the trace store. A run's spans
usually go to its own trace store on loopback, over plain HTTP, so that path goes through
:class:`PlainHttp`; everything requests does beyond one keep-alive connection (TLS and its CA
bundle, proxies from the environment, ``~/.netrc`` credentials) still goes through
:class:`RequestsHttp`, imported only then, with the environment read once
(:func:`requests_session`). :func:`transport_for` chooses, once per child.

Both answer the same three ways: a status code, :class:`NoAnswer` (the request was sent whole
and no answer came: the backend may have stored it) or :class:`NotSent` (the request did not
reach the backend whole: worth trying again). Why a broken connection after the whole request
went out is :class:`NoAnswer` and not :class:`NotSent`: the backend may have read and stored it
before the connection broke, so trying again could store it twice, and calling it lost would be
a lie. A kept-alive connection the backend closed while it was idle is found out before the
next request goes out on it (:func:`_closed_by_peer`, as urllib3 does), so that ordinary case
is a new connection, not an unknown.

:meth:`Transport.abort` is for the exporter child's signal handlers (the parent's limit, the
parent's death): it breaks the connection so that a post blocked on a backend returns at once,
and a post half sent fails as :class:`NotSent` (the backend never gets a whole request).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import requests

#: The environment variables through which requests would send a plain-HTTP post to a proxy.
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


class NotSent(Exception):
    """The request did not reach the backend whole, or no answer could be read: retryable."""


class NoAnswer(Exception):
    """Sent whole, no answer; sending it again could store it twice.

    ``timed_out``: the read timeout ran out (a slow backend: the child sends less per request
    from then on), rather than the connection breaking after the request went out."""

    def __init__(self, timed_out: bool = True) -> None:
        super().__init__("no answer in time" if timed_out else "connection lost after sending")
        self.timed_out = timed_out


class _ClosedWithoutAnswer(NoAnswer):
    """The connection was closed after the request went out, before any answer."""

    def __init__(self) -> None:
        super().__init__(timed_out=False)


def _nothing() -> None:
    pass


class Transport(Protocol):
    """POSTs of encoded requests to one endpoint, each with the headers it was made with (the
    endpoint's: content type, encoding, credentials); see the module docstring for the answers."""

    def post(
        self, body: bytes, timeout: tuple[float, float], on_sent: Callable[[], None] = _nothing
    ) -> int:
        """The answer's status; raises :class:`NoAnswer` or :class:`NotSent`. ``on_sent`` is
        called once the whole request went out, before the answer is awaited."""
        ...

    def abort(self) -> None:
        """Break the connection of a post in progress (called from a signal handler)."""
        ...


class PlainHttp:
    """``http.client`` on one connection, kept alive between posts and opened again after a
    failure; ``timeout`` is (connect, read) seconds, as requests takes it."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urllib.parse.urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = dict(headers)
        self._connection: http.client.HTTPConnection | None = None
        #: Set by :meth:`abort`: the post in progress is not tried again on a new connection.
        self._aborted = False

    def post(
        self, body: bytes, timeout: tuple[float, float], on_sent: Callable[[], None] = _nothing
    ) -> int:
        connection = self._connection
        reused = connection is not None and connection.sock is not None
        self._aborted = False
        try:
            return self._exchange(body, timeout, on_sent)
        except (NotSent, _ClosedWithoutAnswer):
            if not reused or self._aborted:
                raise
        # The kept-alive connection broke as this request went out on it, without a byte of an
        # answer: the backend had closed it while it was idle (its close crossed our request),
        # so it never read this request, which goes again at once on a new connection, as
        # every HTTP client does. On a new connection the same is an unknown.
        return self._exchange(body, timeout, on_sent)

    def _exchange(
        self, body: bytes, timeout: tuple[float, float], on_sent: Callable[[], None]
    ) -> int:
        connect_s, read_s = timeout
        connection = self._connection
        if (
            connection is not None
            and connection.sock is not None
            and _closed_by_peer(connection.sock)
        ):
            self.close()  # closed while idle: it never sees this request; a new connection
            connection = None
        try:
            if connection is None or connection.sock is None:
                connection = self._connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=connect_s
                )
                connection.connect()
            if connection.sock is not None:  # connected just now or kept alive
                connection.sock.settimeout(read_s)
            connection.request("POST", self._target, body=body, headers=self._headers)
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise NotSent(type(exc).__name__) from None
        # The whole request is out (in the kernel's buffer, on its way): from here on the
        # backend may store it, whatever becomes of the answer.
        on_sent()
        try:
            answer = connection.getresponse()
            answer.read()
        except TimeoutError:
            self.close()
            raise NoAnswer(timed_out=True) from None
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.close()
            raise _ClosedWithoutAnswer from None
        except (OSError, http.client.HTTPException):
            self.close()
            raise NoAnswer(timed_out=False) from None
        return answer.status

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def abort(self) -> None:
        self._aborted = True
        connection = self._connection
        sock = None if connection is None else connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection has something to read: the backend closed it (or
    sent bytes nobody asked for); either way it is not fit for the next request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class RequestsHttp:
    """requests' session for everything :class:`PlainHttp` does not do (TLS, proxies, netrc)."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        import requests  # only here: most children never need it (module docstring)

        self._requests = requests
        self._url = url
        self._headers = dict(headers)
        self._session = requests_session(url)

    def post(
        self, body: bytes, timeout: tuple[float, float], on_sent: Callable[[], None] = _nothing
    ) -> int:
        requests = self._requests
        on_sent()  # requests does not say when the body went out: from the start, then
        try:
            answer = self._session.post(
                self._url, data=body, headers=self._headers, timeout=timeout
            )
        except requests.ReadTimeout:
            raise NoAnswer(timed_out=True) from None
        except requests.RequestException as exc:
            raise NotSent(type(exc).__name__) from None
        return int(answer.status_code)

    def abort(self) -> None:
        """Nothing to break from a signal handler here: requests holds its connection out of
        reach; the parent's limit (SIGKILL) ends a post that hangs, counted as unknown."""


def requests_session(url: str) -> requests.Session:
    """A session that reads the environment's proxy, CA bundle and netrc settings once.

    Left to itself, requests reads them again on every post (``trust_env``: it walks
    ``os.environ`` for proxies and opens ``~/.netrc``), about 0.5 ms a post on the development
    machine, paid per batch by every process's exporter child. Read once here, the posts go out
    with the same settings; only a change to them while the run lasts is no longer seen.
    """
    import requests

    session = requests.Session()
    settings = session.merge_environment_settings(url, {}, None, None, None)
    auth = requests.utils.get_netrc_auth(url)
    session.trust_env = False
    session.proxies = settings["proxies"]
    session.verify = settings["verify"]
    if auth is not None:
        session.auth = auth
    return session


def plain_http_will_do(url: str, environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """True when requests would send ``url`` exactly as :class:`PlainHttp` does: plain HTTP,
    no credentials in the URL, no proxy variable set and no netrc file it would read
    credentials from."""
    environ = os.environ if environ is None else environ
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or "@" in parts.netloc:
        return False
    if any(environ.get(name) for name in _PROXY_VARIABLES):
        return False
    netrc = environ.get("NETRC")
    if netrc:
        return not Path(netrc).expanduser().exists()
    home = Path("~").expanduser()
    return not any((home / name).exists() for name in (".netrc", "_netrc"))


def transport_for(url: str, headers: Mapping[str, str]) -> Transport:
    """:class:`PlainHttp` where it sends as requests would, else :class:`RequestsHttp`; each
    post to ``url`` carries ``headers``."""
    return PlainHttp(url, headers) if plain_http_will_do(url) else RequestsHttp(url, headers)
