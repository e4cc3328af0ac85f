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
and no answer came within the read timeout: the backend may have stored it) or
:class:`NotSent` (nothing reached the backend, or the connection broke: worth trying again).
"""

from __future__ import annotations

import http.client
import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import requests

#: The environment variables through which requests would send a plain-HTTP post to a proxy.
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


class NotSent(Exception):
    """The request did not reach the backend whole, or no answer could be read: retryable."""


class NoAnswer(Exception):
    """Sent whole, no answer within the read timeout; sending it again could store it twice."""


class Transport(Protocol):
    """One POST of an encoded request; see the module docstring for the answers."""

    def post(self, body: bytes, headers: dict[str, str], timeout: tuple[float, float]) -> int:
        """The answer's status; raises :class:`NoAnswer` or :class:`NotSent`."""
        ...


class PlainHttp:
    """``http.client`` on one connection, kept alive between posts and opened again after a
    failure; ``timeout`` is (connect, read) seconds, as requests takes it."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._connection: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str], timeout: tuple[float, float]) -> int:
        connection = self._connection
        reused = connection is not None and connection.sock is not None
        try:
            return self._exchange(body, headers, timeout)
        except NotSent:
            if not reused:
                raise
        # The backend closed the kept-alive connection while it was idle: it never saw this
        # request, so it goes again at once on a new connection (what urllib3 does too).
        return self._exchange(body, headers, timeout)

    def _exchange(self, body: bytes, headers: dict[str, str], timeout: tuple[float, float]) -> int:
        connect_s, read_s = timeout
        connection = self._connection
        try:
            if connection is None or connection.sock is None:
                connection = self._connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=connect_s
                )
                connection.connect()
            if connection.sock is not None:  # connected just now or kept alive
                connection.sock.settimeout(read_s)
            connection.request("POST", self._target, body=body, headers=headers)
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise NotSent(type(exc).__name__) from None
        try:
            answer = connection.getresponse()
            answer.read()
        except TimeoutError:
            self.close()
            raise NoAnswer from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise NotSent(type(exc).__name__) from None
        return answer.status

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class RequestsHttp:
    """requests' session for everything :class:`PlainHttp` does not do (TLS, proxies, netrc)."""

    def __init__(self, url: str) -> None:
        import requests  # only here: most children never need it (module docstring)

        self._requests = requests
        self._url = url
        self._session = requests_session(url)

    def post(self, body: bytes, headers: dict[str, str], timeout: tuple[float, float]) -> int:
        requests = self._requests
        try:
            answer = self._session.post(self._url, data=body, headers=headers, timeout=timeout)
        except requests.ReadTimeout:
            raise NoAnswer from None
        except requests.RequestException as exc:
            raise NotSent(type(exc).__name__) from None
        return int(answer.status_code)


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


def transport_for(url: str) -> Transport:
    """:class:`PlainHttp` where it sends as requests would, else :class:`RequestsHttp`."""
    return PlainHttp(url) if plain_http_will_do(url) else RequestsHttp(url)
