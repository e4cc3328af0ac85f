"""The checks around one rollout's request and answer, shared by agents and episode ``/run``.

Both places that perform a rollout must refuse the same bad bodies, map the same failures to
the same statuses (whose fault: the task's -> 400, the model's or environment's -> 502/504,
or 424 when it refused for good (a 4xx: not retried), our own -> 500), and refuse the same answers without a finite numeric reward.
"""

from __future__ import annotations

import math
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
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
from rollgym.rewards import plain_number

T = TypeVar("T")

#: The status of a rollout whose model or environment refused a call for good (a 4xx other
#: than 408/429): a 4xx, so the driver does not retry it, and not 400, which blames the task.
FAILED_DEPENDENCY = 424

#: The field an environment names when it does not know the session a call is for.
SESSION_FIELD = "session_id"


def _permanent(status: int) -> bool:
    return 400 <= status < 500 and status not in (408, 429)


def _session_lost(exc: ServerCallError) -> bool:
    """The environment answered 404 for the session itself (it is unknown or expired)."""
    return exc.status == 404 and exc.field == SESSION_FIELD


def check_reward(answer: object, who: str) -> dict[str, object]:
    """Return ``answer`` if it is an object with a finite numeric ``reward``; else HTTP 500.

    A reward of another real-number type (NumPy's ``float32``, ``int64``) is answered as the
    Python number it equals (:func:`~rollgym.rewards.plain_number`); a bool is not a reward."""
    if not isinstance(answer, dict):
        raise HTTPError(
            500, f"{who} answered {type(answer).__name__}, not an object with a 'reward'"
        )
    reward = plain_number(answer.get("reward"))
    if reward is not answer.get("reward"):
        answer = {**answer, "reward": reward}
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


#: Most of the author's frames an error body carries (the innermost).
MAX_FRAMES = 8
#: rollgym's package folder: frames in it are rollgym's, not the author's.
_PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep


def own_frames(exc: BaseException) -> list[str]:
    """Where the agent author's code raised: the innermost frames of ``exc``'s traceback
    outside rollgym's package, as ``file:line in function`` (innermost last). Frames of the
    standard library and installed packages count too: the author's call into them is the
    frame just before."""
    frames = [
        f"{frame.filename}:{frame.lineno} in {frame.name}"
        for frame in traceback.extract_tb(exc.__traceback__)
        if not str(Path(frame.filename).resolve()).startswith(_PACKAGE)
    ]
    return frames[-MAX_FRAMES:]


def _log_traceback(who: str, rollout_id: str | None, exc: BaseException) -> None:
    """The whole traceback in the server's log (``logs/<server>.log``), which the failure
    record points at: the error body carries only its message and the author's frames."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    print(
        f"rollgym: {who} failed on rollout {rollout_id or '-'}:\n{''.join(lines).rstrip()}",
        file=sys.stderr,
        flush=True,
    )


async def guarded(
    who: str,
    work: Awaitable[T],
    *,
    rollout_id: str | None = None,
    partial: Callable[[], dict[str, object] | None] | None = None,
) -> T:
    """Await ``work``; translate its failure into the HTTP status that says whose fault it is.

    ``partial`` gives the trajectory recorded so far (the turns before the failure): it joins
    the error body as ``trajectory``, and the author's own exception its ``frames``."""
    try:
        return await work
    except HTTPError:
        raise
    except ServerCallError as exc:
        if exc.bad_input:
            raise HTTPError(400, str(exc), field=exc.field or "task") from None
        detail = _detail(partial, None)
        if exc.field == AUTHENTICATION or exc.status in AUTH_STATUSES:
            # A refused credential: permanent, and the driver records it as authentication.
            raise HTTPError(
                FAILED_DEPENDENCY, f"{who}: {exc}", field=AUTHENTICATION, detail=detail
            ) from None
        if _session_lost(exc):
            # The environment no longer holds the episode (its replica was restarted, or the
            # session expired): a new attempt seeds a new session, so the driver retries it.
            raise HTTPError(502, f"{who}: {exc}", detail=detail) from None
        if exc.status is not None and _permanent(exc.status):
            # The model or environment refused for good: retrying the rollout cannot help.
            raise HTTPError(FAILED_DEPENDENCY, f"{who}: {exc}", detail=detail) from None
        raise HTTPError(502, f"{who}: {exc}", detail=detail) from None
    except TransportError as exc:
        status = 504 if isinstance(exc, RequestTimeout) else 502
        raise HTTPError(status, f"{who}: {exc}", detail=_detail(partial, None)) from None
    except Exception as exc:
        _log_traceback(who, rollout_id, exc)
        message = f"{who} failed: {type(exc).__name__}: {exc}"
        # chained (not ``from None``): the span that records it keeps the author's frames
        raise HTTPError(500, message, detail=_detail(partial, exc)) from exc


def _detail(
    partial: Callable[[], dict[str, object] | None] | None, exc: BaseException | None
) -> dict[str, object] | None:
    """The error body's extra keys: the author's ``frames`` and the partial ``trajectory``."""
    detail: dict[str, object] = {}
    if exc is not None:
        frames = own_frames(exc)
        if frames:
            detail["frames"] = frames
    trajectory = partial() if partial is not None else None
    if trajectory is not None:
        detail["trajectory"] = trajectory
    return detail or None
