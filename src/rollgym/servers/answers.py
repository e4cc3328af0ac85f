"""The checks around one rollout's request and answer, shared by agents and episode ``/run``.

Both places that perform a rollout must refuse the same bad bodies, map the same failures to
the same statuses (whose fault: the task's -> 400, the model's or environment's -> 502/504,
or 424 when it refused for good (a 4xx: not retried), our own -> 500), and refuse the same answers without a finite numeric reward.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import TypeVar

import orjson
from fastapi import Request

from rollgym.errors import (
    AUTH_STATUSES,
    AUTHENTICATION,
    HTTPError,
    RequestTimeout,
    ServerCallError,
    TransportError,
)

T = TypeVar("T")

#: The status of a rollout whose model or environment refused a call for good (a 4xx other
#: than 408/429): a 4xx, so the driver does not retry it, and not 400, which blames the task.
FAILED_DEPENDENCY = 424


def _permanent(status: int) -> bool:
    return 400 <= status < 500 and status not in (408, 429)


def check_reward(answer: object, who: str) -> dict[str, object]:
    """Return ``answer`` if it is an object with a finite numeric ``reward``; else HTTP 500."""
    if not isinstance(answer, dict):
        raise HTTPError(
            500, f"{who} answered {type(answer).__name__}, not an object with a 'reward'"
        )
    reward = answer.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise HTTPError(
            500, f"{who} answered without a numeric 'reward' (got {reward!r})", field="reward"
        )
    if not math.isfinite(reward):
        raise HTTPError(500, f"{who} answered a non-finite 'reward' ({reward!r})", field="reward")
    return answer


async def json_object(request: Request) -> dict[str, object]:
    """The request body as a JSON object, or HTTP 400 naming the problem."""
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc}", field="body") from None
    if not isinstance(body, dict):
        raise HTTPError(400, f"body must be a JSON object, got {type(body).__name__}", field="body")
    return body


async def guarded(who: str, work: Awaitable[T]) -> T:
    """Await ``work``; translate its failure into the HTTP status that says whose fault it is."""
    try:
        return await work
    except HTTPError:
        raise
    except ServerCallError as exc:
        if exc.bad_input:
            raise HTTPError(400, str(exc), field=exc.field or "task") from None
        if exc.field == AUTHENTICATION or exc.status in AUTH_STATUSES:
            # A refused credential: permanent, and the driver records it as authentication.
            raise HTTPError(FAILED_DEPENDENCY, f"{who}: {exc}", field=AUTHENTICATION) from None
        if exc.status is not None and _permanent(exc.status):
            # The model or environment refused for good: retrying the rollout cannot help.
            raise HTTPError(FAILED_DEPENDENCY, f"{who}: {exc}") from None
        raise HTTPError(502, f"{who}: {exc}") from None
    except TransportError as exc:
        status = 504 if isinstance(exc, RequestTimeout) else 502
        raise HTTPError(status, f"{who}: {exc}") from None
    except Exception as exc:
        raise HTTPError(500, f"{who} failed: {type(exc).__name__}: {exc}") from None
