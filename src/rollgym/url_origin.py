"""A URL cut at the end of its origin, so what depends only on the origin is worked out once.

Why: a rollout-scoped model URL (``http://host:port/r/<rollout id>/v1/chat/completions``) is
new for every rollout, so a cache keyed by the whole URL (the lean client's request target,
the HTTP client span's attributes) misses on every model call and pays ``urlsplit`` plus
attribute building each time. Everything that needs parsing (scheme, host, port, credentials)
sits in the origin, which is the same for every rollout; the rest is the request target as it
is, *provided* ``urlsplit`` would have kept it as it is.

It would not always: ``urlsplit`` removes tab, CR and LF anywhere in a URL (so a URL with a line
break in its path never splits a request line), cuts off a ``#fragment``, and drops an empty
``?`` query. :func:`split_origin` answers only for URLs where none of that applies; for any
other URL it answers None and the caller parses the whole URL exactly as before.
"""

from __future__ import annotations

#: What ``urlsplit`` removes (tab, CR, LF) or treats specially past the origin (``#``).
_REST_SPECIAL = ("\t", "\r", "\n", "#")
#: The same, plus ``?``, which would end the host part early inside what looks like the origin.
_ORIGIN_SPECIAL = (*_REST_SPECIAL, "?")


def split_origin(url: str) -> tuple[str, str] | None:
    """``(origin, rest)`` with ``origin + rest == url``, where ``rest`` (from the first ``/``
    after ``scheme://``) is exactly the path and query ``urlsplit`` would find; None for any
    URL that is not plain ``http://`` or ``https://`` with a host, or whose parts ``urlsplit``
    would change (see the module doc)."""
    if url.startswith("http://"):
        start = 7
    elif url.startswith("https://"):
        start = 8
    else:
        return None
    slash = url.find("/", start)
    if slash <= start:  # no path (nothing to share), or no host
        return None
    origin = url[:slash]
    rest = url[slash:]
    for special in _ORIGIN_SPECIAL:
        if special in origin:
            return None
    for special in _REST_SPECIAL:
        if special in rest:
            return None
    if rest.endswith("?"):  # an empty query: urlsplit drops the "?"
        return None
    return origin, rest
