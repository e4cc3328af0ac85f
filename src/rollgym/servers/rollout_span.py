"""A rollout played under its ``gym.rollout`` span when the ``rollout`` group is on.

Both places a server plays a whole rollout (an agent's ``/run``, an environment's episode)
read the driver's headers and open the span the same way (:func:`answer_rollout_route`); with the group off the span module is never imported, so a
server with tracing off pays for one ``if``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from rollgym.errors import HTTPError
from rollgym.http.server import OrjsonResponse
from rollgym.policy_versions import FLOOR_HEADER
from rollgym.telemetry.groups import gate
from rollgym.trajectory.record import CAPTURE_HEADER

_Answer = TypeVar("_Answer")


async def under_rollout_span(
    rollout_id: str | None, agent_name: str, play: Awaitable[_Answer]
) -> _Answer:
    """Await ``play`` inside ``gym.rollout`` (when the gate says so); its answer.
    ``agent_name``: the server playing the rollout, the span's ``gen_ai.agent.name``."""
    if not gate.rollout:
        return await play
    from rollgym.telemetry import spans

    with spans.rollout_span(rollout_id, agent_name):
        return await play


class RolloutPlay(Protocol):
    """A whole rollout, given the driver's trajectory ``capture`` and policy ``floor``
    headers (each None when the request has none)."""

    def __call__(self, capture: str | None, floor: str | None) -> Awaitable[object]: ...


async def answer_rollout_route(
    request: Request, rollout_id: str | None, server_name: str, play: RolloutPlay
) -> Response:
    """A route that plays one whole rollout: ``play`` given the request's capture and floor
    headers, awaited under the rollout span, its answer sent as JSON (a 500 naming the part
    JSON cannot hold, such as a set or a lone surrogate, when it has one)."""
    capture = request.headers.get(CAPTURE_HEADER)
    floor = request.headers.get(FLOOR_HEADER)

    async def answered() -> Response:
        answer = await play(capture, floor)
        try:  # written inside the span: an answer JSON cannot hold fails the rollout there too
            return OrjsonResponse(answer)
        except HTTPError as exc:
            raise HTTPError(exc.status, f"{server_name!r}: {exc.message}") from None

    return await under_rollout_span(rollout_id, server_name, answered())
