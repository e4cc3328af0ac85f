"""What one outgoing exchange may cost or carry: request size, answer size, redirects, its URL.

The driver sends rows it did not write to agents it may not run (``url:`` servers), so neither
side can be trusted to stay small: a 1 GB row would be serialised and sent whole, a 50 MB
answer read whole into memory and then into ``rollouts.jsonl``, and a redirect followed to a
host nobody configured. :class:`ExchangeLimits` holds the three limits of one
:class:`~rollgym.http.client.HttpClient`; each check raises an
:class:`~rollgym.errors.ExchangeRefused` whose message names the config key that sets the
limit (``run.max_request_bytes``, ``run.max_response_bytes``) or the two hosts, so the user
knows what to change. Another attempt would be refused the same way: the driver records the
failure as permanent.

A URL with an ASCII control character in it (CR, LF, tab, NUL, DEL...) is refused before
anything is sent, as the ``openai`` SDK's client (httpx) refuses it: aiohttp and ``urlsplit``
would quietly remove tab, CR and LF, so ``/v1/\\r\\nHost: x`` would go out as a different path
(``/v1/Host: x``) than the one the caller built, and a row's text that reached a path would
change where a request goes instead of failing where it can be seen.

Why not aiohttp's own ``max_redirects``: it follows a redirect to any host. Here only a
redirect to the same scheme, host and port is followed (at most :data:`MAX_REDIRECTS`);
anything else is refused before a byte goes to the other host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from rollgym.defaults import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES
from rollgym.errors import ExchangeRefused
from rollgym.urls import redact_url

if TYPE_CHECKING:  # an answer's type only: importing aiohttp is its client's business
    import aiohttp

#: Same-host redirects followed for one request before it is refused.
MAX_REDIRECTS = 5
#: Statuses that redirect (with a ``Location``).
REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
#: The driver's defaults (``run.max_request_bytes``, ``run.max_response_bytes``).
DEFAULT_MAX_REQUEST_BYTES = MAX_REQUEST_BYTES
DEFAULT_MAX_RESPONSE_BYTES = MAX_RESPONSE_BYTES
_CHUNK = 64 * 1024
#: ASCII control characters: never part of a URL a request can be sent to as written.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ExchangeLimits:
    """Limits of one client; ``None`` is no limit. The ``*_key`` fields are what messages name."""

    max_request_bytes: int | None = None
    max_response_bytes: int | None = None
    request_key: str = "run.max_request_bytes"
    response_key: str = "run.max_response_bytes"

    def check_request(self, server: str, method: str, url: str, size: int) -> None:
        """Refuse a body over ``max_request_bytes`` before any of it is sent. The URL is
        parsed for the path the refusal names only when it refuses: a ``urlsplit`` on every
        request was a measurable part of the client's cost (``bench/http_client.py``)."""
        limit = self.max_request_bytes
        if limit is not None and size > limit:
            path = urlsplit(url).path or "/"
            raise ExchangeRefused(
                f"the request to {server!r} ({method} {path}) is {size} bytes, over the limit "
                f"of {limit} bytes ({self.request_key}); not sent",
                server=server,
                kind="request_too_large",
            )

    @staticmethod
    def check_url(server: str, method: str, url: str) -> None:
        """Refuse a URL with a control character in it (module doc), naming where it is."""
        where = _control_character(url)
        if where is not None:
            raise _invalid_url(
                server,
                f"the URL of a request to {server!r} ({method}) has {where}: "
                f"{redact_url(url)!r}; not sent",
            )

    def too_large(self, server: str, method: str, path: str, size: str) -> ExchangeRefused:
        return ExchangeRefused(
            f"the answer of {server!r} ({method} {path}) is {size} bytes, over the limit of "
            f"{self.max_response_bytes} bytes ({self.response_key}); refused",
            server=server,
            kind="response_too_large",
        )

    def check_redirect(
        self, server: str, status: int, url: str, target: str, redirects: int
    ) -> None:
        """Refuse a redirect to another origin, or one too many."""
        if _origin(target) != _origin(url):
            raise ExchangeRefused(
                f"redirect to another host refused: {server!r} answered HTTP {status} "
                f"redirecting {redact_url(url)} to {redact_url(target)}",
                server=server,
                kind="redirect_refused",
            )
        if redirects > MAX_REDIRECTS:
            raise ExchangeRefused(
                f"{server!r} redirected {redact_url(url)} more than {MAX_REDIRECTS} times; refused",
                server=server,
                kind="redirect_refused",
            )


def _control_character(url: str) -> str | None:
    """Where ``url``'s first control character is, in words (``a control character '\\t' at
    position 4``), or None when it has none."""
    found = _CONTROL.search(url)
    if found is None:
        return None
    return f"a control character {found.group()!r} at position {found.start()}"


def _invalid_url(server: str, message: str) -> ExchangeRefused:
    """The refusal of a URL with a control character in it, the request's or a redirect's."""
    return ExchangeRefused(message, server=server, kind="invalid_url")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def redirect_target(server: str, status: int, url: str, headers: Mapping[str, str]) -> str | None:
    """The absolute URL a redirect answer points at, or None when it is not a redirect.

    A ``Location`` with a control character in it (a tab can arrive in a header value) is
    refused as ``invalid_url`` before it is joined: ``urljoin`` would quietly drop a tab and
    follow another URL than the one the server wrote."""
    if status not in REDIRECT_STATUSES:
        return None
    location = headers.get("Location")
    if not location:
        return None
    where = _control_character(location)
    if where is not None:
        raise _invalid_url(
            server,
            f"{server!r} answered HTTP {status} redirecting {redact_url(url)} to a "
            f"Location with {where}: {redact_url(location)!r}; not followed",
        )
    return urljoin(url, location)


async def read_bounded(
    response: aiohttp.ClientResponse, limits: ExchangeLimits, server: str, method: str, path: str
) -> bytes:
    """The whole body, read in chunks; refused once it passes ``max_response_bytes``.

    A declared ``Content-Length`` over the limit is refused before anything is read; a body
    without one (chunked) is refused at the first chunk past the limit, so memory never holds
    more than the limit plus one chunk.
    """
    limit = limits.max_response_bytes
    if limit is None:
        return await response.read()
    declared = response.content_length
    if declared is not None and declared > limit:
        raise limits.too_large(server, method, path, str(declared))
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            raise limits.too_large(server, method, path, f"more than {limit}")
    return bytes(body)
