"""Trace context carried in a rollout-scoped URL, for agents that forward no headers.

An agent is given a rollout-scoped model URL (``<model>/r/<rollout id>/v1``) so that its model
calls are attributed to the rollout even when it sends no ``X-Request-Id``. Attribution is not
parentage: without a ``traceparent`` header each of those calls would start a trace of its
own. So the URL an agent is given also carries the W3C ``traceparent`` of the rollout's span,
as one path segment after the rollout id::

    <model>/r/<rollout id>/00-<trace id>-<span id>-<flags>/v1/chat/completions

and the server middleware uses that segment as the caller's context when the request came with
no ``traceparent`` header (a header, when present, always wins). A URL without the segment
(``/r/<rollout id>/v1/...``, the documented form) keeps working and carries no context. A
rollout id never ends in a segment of that exact shape (ids are quoted into the path), so the
split is unambiguous.
"""

from __future__ import annotations

import re

#: The W3C ``traceparent`` of version 00: what the scoped path segment holds.
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_SCOPED_PREFIX = "/r/"
_API = "/v1/"


def split_scoped_id(path_part: str) -> tuple[str, str | None]:
    """``"3-0/00-<...>-01"`` -> ``("3-0", "00-<...>-01")``; a part without the segment is the
    rollout id as it is (``("3-0", None)``)."""
    head, slash, tail = path_part.rpartition("/")
    if slash and head and _TRACEPARENT.fullmatch(tail):
        return head, tail
    return path_part, None


def traceparent_in_path(path: str) -> str | None:
    """The ``traceparent`` a rollout-scoped request path carries, or None."""
    if not path.startswith(_SCOPED_PREFIX):
        return None
    end = path.rfind(_API)
    if end <= len(_SCOPED_PREFIX):
        return None
    return split_scoped_id(path[len(_SCOPED_PREFIX) : end])[1]


def scoped_base(scoped_url: str, traceparent: str | None) -> str:
    """``<model>/r/<id>`` with the context segment appended when there is one."""
    if traceparent is None or not _TRACEPARENT.fullmatch(traceparent):
        return scoped_url
    return f"{scoped_url}/{traceparent}"
