"""Request ids of model calls: ``<rollout id>.<turn>``, and the forms an upstream accepts.

Every model call of a rollout carries ``X-Request-Id: <rollout id>.<turn>``, so an engine's
own request id (vLLM answers ``chatcmpl-<that>``) names the rollout (the spelling lives in
:mod:`rollgym.identity`). Two things live here:

- :class:`TurnCounter`: a model server that gets a header-less request on the rollout-scoped
  URL (``/r/<rollout id>/v1/...``) numbers that rollout's turns itself. Its memory is bounded
  (least recently used rollouts are forgotten), so a long run cannot grow it.
- :func:`upstream_uuid`: some engines (llama.cpp's Python server) refuse any request id that
  is not a UUID. The UUID sent instead is derived from the request id (UUIDv5), so the same
  turn always maps to the same UUID and the mapping can be recorded on the model span.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Final

from rollgym.identity import request_id_of, rollout_of_request_id

__all__ = [
    "TurnCounter",
    "is_uuid",
    "request_id_of",
    "rollout_of_request_id",
    "upstream_uuid",
]

#: The namespace of :func:`upstream_uuid`; fixed forever, so ids stay comparable across runs.
NAMESPACE: Final = uuid.UUID("5f0c1f7e-6a43-4c55-9a37-0b3f6f2d8e11")
#: How many rollouts a :class:`TurnCounter` remembers.
DEFAULT_CAPACITY: Final = 65_536


def upstream_uuid(request_id: str) -> str:
    """The UUID sent upstream in place of ``request_id`` (deterministic: UUIDv5)."""
    return str(uuid.uuid5(NAMESPACE, request_id))


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class TurnCounter:
    """The next turn of each rollout, for requests that came without a request id.

    Bounded: past ``capacity`` rollouts, the least recently seen one is forgotten (a rollout
    that comes back after that starts again at turn 0, which only reuses a request id).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._next: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._next)

    def next_request_id(self, rollout_id: str) -> str:
        turn = self._next.pop(rollout_id, 0)
        self._next[rollout_id] = turn + 1
        if len(self._next) > self._capacity:
            self._next.popitem(last=False)
        return request_id_of(rollout_id, turn)
