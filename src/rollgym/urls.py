"""Credentials in URLs: the one place they are hidden before a URL is written anywhere.

A ``url:`` server (``http://user:pass@host:port``) or an OTLP endpoint may carry a user name
and password. They are *used* for the request (aiohttp and requests turn a URL's userinfo into
HTTP basic auth) but never written: config.yaml, span attributes, resource attributes, logs,
error messages, ``summary.json`` and ``progress.json`` show the URL through :func:`redact_url`
(a URL) or :func:`redact_text` (free text that may contain URLs).

The form is the one OpenTelemetry's HTTP semantic conventions give for ``url.full``: "username
and password SHOULD be redacted and attribute's value SHOULD be
``https://REDACTED:REDACTED@www.example.com/``", so a reader still sees that credentials were
given, and which host they were for.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "REDACTED"
#: ``scheme://userinfo@``: userinfo is everything up to the first ``@`` before the host
#: ends (no ``/``, ``?``, ``#`` or whitespace), RFC 3986 section 3.2.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s]*@")


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user name or password."""
    return "@" in url and _USERINFO.search(url) is not None


def redact_url(url: str) -> str:
    """``url`` with its user name and password replaced by ``REDACTED`` (semconv form).

    Anything that is not a URL with userinfo comes back unchanged, so it is safe to call on
    every URL that is about to be written.
    """
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(
        (parts.scheme, f"{REDACTED}:{REDACTED}@{host}", parts.path, parts.query, parts.fragment)
    )


def redact_text(text: str) -> str:
    """``text`` with the userinfo of every URL in it redacted (log lines, error messages)."""
    if "@" not in text:
        return text
    return _USERINFO.sub(rf"\1{REDACTED}:{REDACTED}@", text)


def without_credentials(url: str) -> str:
    """``url`` with no userinfo at all: for keys and comparisons (same host or not)."""
    if "@" not in url:
        return url
    parts = urlsplit(url)
    return urlunsplit(
        (parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment)
    )


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the base URL of an HTTP server rollgym calls, in a few words
    (None when it can be): not http or https, no host, a port that is not a number from 0 to
    65535. Said where the URL is given, so a mistyped one is one error there instead of every
    rollout failing to connect."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks it (ValueError: not a number, out of range)
    except ValueError as exc:
        return str(exc).lower()
    if parts.scheme not in ("http", "https"):
        return "not http:// or https://"
    if not parts.hostname:
        return "no host"
    return None
