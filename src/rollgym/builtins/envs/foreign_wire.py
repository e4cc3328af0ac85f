"""What the clients of the foreign protocols (OpenEnv, NeMo Gym, ORS) share on the wire.

Each protocol's client (``openenv_wire``, ``nemo_gym_wire``, ``ors_wire``) speaks its own
messages, but they fail alike: one line naming the protocol step and what went wrong, carrying
the HTTP status rollgym answers for it (:class:`ForeignError`); an exchange that gets no answer
in time or cannot reach the server is the same two lines in each (:func:`bounded_exchange`);
an answer quoted in an error line is cut the same way (:func:`quoted`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp


class ForeignError(Exception):
    """An exchange with a foreign server failed at ``step``.

    ``status`` is the HTTP status rollgym answers for it: 502 (the server failed or answered
    off-protocol), 503 (it could not be reached, or had no session to give), 504 (no answer
    in time).
    """

    def __init__(self, step: str, message: str, *, status: int = 502) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.status = status


def quoted(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at ``limit`` characters (an answer quoted in an error line)."""
    one_line = " ".join(text.split())
    return one_line[:limit] + ("..." if len(one_line) > limit else "")


@asynccontextmanager
async def bounded_exchange(
    error: type[ForeignError], step: str, what: str, timeout_s: float
) -> AsyncIterator[None]:
    """The block is one exchange (``what``: ``POST /path``), answered within ``timeout_s``:
    no answer in time is ``error`` with status 504, a server not reached one with 503."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except TimeoutError:
        raise error(step, f"no answer within {timeout_s:g} s", status=504) from None
    except aiohttp.ClientError as exc:
        raise error(step, f"{what} failed: {exc}", status=503) from None
