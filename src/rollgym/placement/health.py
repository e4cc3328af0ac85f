"""Is a server there and healthy? One poll loop for every placement and every ``url:`` server.

A launched local server announces its port in a ready file (:mod:`rollgym.child_process`);
a Ray actor returns its URL; a ``url:`` server has one from the config. All three then wait
here until ``GET <url>/health`` answers, failing early when the process exits or when
nothing listens at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import aiohttp

from rollgym.child_process import describe_exit, read_ready_file
from rollgym.errors import LaunchError

#: The first pause between two looks, growing by ``_POLL_GROWTH`` up to ``_POLL_MAX_S``: a
#: server that is up at once is seen at once, a slow one is not asked 20 times a second.
_POLL_FIRST_S = 0.005
_POLL_GROWTH = 1.5
_POLL_MAX_S = 0.05


class ExitWatch(Protocol):
    """A launched server's process, as far as waiting for it needs: has it exited, and how."""

    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...


def poll_pauses() -> Iterator[float]:
    """The pauses between looks: 5 ms, growing by half each time, to 50 ms."""
    pause = _POLL_FIRST_S
    while True:
        yield pause
        pause = min(_POLL_MAX_S, pause * _POLL_GROWTH)


async def wait_healthy(
    url: str | None,
    *,
    session: aiohttp.ClientSession,
    deadline: float,
    ready_file: Path | None = None,
    process: ExitWatch | None = None,
    failure: Callable[[str], LaunchError],
    strict: bool = True,
    refused_for_s: float | None = None,
) -> str:
    """Poll until ``GET <url>/health`` answers ok; return the base URL.

    For a launched server the URL comes from its ready file; its exit first is a failure.
    ``strict=False`` (a server given by ``url:``, which may be vLLM or any OpenAI-compatible
    endpoint rather than a rollgym server) only asks that it answers HTTP below 500.
    ``refused_for_s``: fail once every connection was refused for that long (nothing listens
    there), rather than waiting for the whole deadline.
    """
    last_problem = "no answer yet"
    refused_since: float | None = None
    pauses = poll_pauses()
    while True:
        if process is not None and process.poll() is not None:
            raise failure(f"exited ({describe_exit(process.returncode)}) before it was healthy")
        if url is None and ready_file is not None:
            port = read_ready_file(ready_file)
            url = f"http://127.0.0.1:{int(port)}" if port else None
        if url is not None:
            last_problem = await _health_problem(session, url, strict)
            if not last_problem:
                return url
            if last_problem.startswith(_REFUSED):
                refused_since = refused_since or time.monotonic()
                if refused_for_s is not None and time.monotonic() - refused_since > refused_for_s:
                    raise failure(
                        f"refusing connections for {refused_for_s:.0f} s: nothing listens there "
                        f"({last_problem})"
                    )
            else:
                refused_since = None
        if time.monotonic() > deadline:
            raise failure(f"not healthy in time ({last_problem})")
        await asyncio.sleep(next(pauses))


_REFUSED = "connection refused"


async def _health_problem(session: aiohttp.ClientSession, url: str, strict: bool = True) -> str:
    """'' when healthy, else why not (starting with ``connection refused`` when it was)."""
    try:
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
            if not strict:
                return "" if resp.status < 500 else f"GET /health answered HTTP {resp.status}"
            if resp.status != 200:
                return f"GET /health answered HTTP {resp.status}"
            body = await resp.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"{_REFUSED}: GET {url}/health: {exc}"
        return f"GET {url}/health: {type(exc).__name__}: {exc}".rstrip(": ")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"GET {url}/health: {type(exc).__name__}: {exc}".rstrip(": ")
    if not isinstance(body, dict) or body.get("status") != "ok":
        return f"GET /health answered {body!r}"
    return ""
