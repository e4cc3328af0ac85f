"""Is a server there and healthy? One poll loop for every placement and every ``url:`` server.

A launched local server announces its port in a ready file (:mod:`rollgym.child_process`);
a Ray actor returns its URL; a ``url:`` server has one from the config. All three then wait
here until ``GET <url>/health`` answers, failing early when the process exits or when
nothing listens at all.

The looks go out through :class:`HealthSession`: the lean client (:mod:`rollgym.http.lean`)
for plain ``http://``, so a launch imports no aiohttp (about 0.2 s of CPU, on the path to
ready), and aiohttp only for what the lean client does not speak (``https://``, credentials
in a ``url:``). No span and no ``traceparent``: a health check is not a rollout's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import orjson

from rollgym.child_process import describe_exit, read_ready_file
from rollgym.errors import LaunchError
from rollgym.http import lean
from rollgym.servers.start_checks import read_problem

if TYPE_CHECKING:
    import aiohttp

#: The first pause between two looks, growing by ``_POLL_GROWTH`` up to ``_POLL_MAX_S``: a
#: server that is up at once is seen at once, a slow one is not asked 20 times a second.
_POLL_FIRST_S = 0.005
_POLL_GROWTH = 1.5
_POLL_MAX_S = 0.05
#: How long one look may take, and how much of its answer is read.
_LOOK_TIMEOUT_S = 2.0
_LOOK_MAX_BYTES = 1 << 16


class HealthSession:
    """The connections the health checks of one launch (or one restart) share: kept alive
    between looks at one server, closed when the block ends."""

    def __init__(self) -> None:
        self._lean = lean.LeanPool(limit=0, keepalive_s=_LOOK_TIMEOUT_S * 5)
        self._aiohttp: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HealthSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._lean.close()
        if self._aiohttp is not None:
            await self._aiohttp.close()
            self._aiohttp = None

    async def get(self, url: str) -> tuple[int, bytes]:
        """``GET url``: its status and body. Raises :class:`ConnectionRefusedError` when
        nothing listens, ``OSError`` (why it failed, in words) for any other failure below
        HTTP, ``TimeoutError`` after :data:`_LOOK_TIMEOUT_S`."""
        where = lean.target(url)
        if where is None:
            return await self._get_aiohttp(url)
        request = lean.request_head("GET", where, {}, None)
        try:
            async with asyncio.timeout(_LOOK_TIMEOUT_S):
                answer = await self._lean.exchange(where, request, limit=_LOOK_MAX_BYTES)
        except lean.CannotConnect as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise ConnectionRefusedError(str(exc)) from None
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        except (lean.LeanError, lean.AnswerTooLarge) as exc:
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        return answer.status, answer.body

    async def _get_aiohttp(self, url: str) -> tuple[int, bytes]:
        """For a ``url:`` server the lean client cannot reach (TLS, credentials): aiohttp,
        imported here only."""
        import aiohttp

        if self._aiohttp is None:
            self._aiohttp = aiohttp.ClientSession()
        try:
            async with self._aiohttp.get(
                url, timeout=aiohttp.ClientTimeout(total=_LOOK_TIMEOUT_S)
            ) as resp:
                return resp.status, await resp.content.read(_LOOK_MAX_BYTES)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise ConnectionRefusedError(str(exc)) from None
            raise OSError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        except aiohttp.ClientError as exc:
            raise OSError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None


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
    session: HealthSession,
    deadline: float,
    ready_file: Path | None = None,
    process: ExitWatch | None = None,
    failure: Callable[[str], LaunchError],
    strict: bool = True,
    refused_for_s: float | None = None,
    server: str = "",
) -> str:
    """Poll until ``GET <url>/health`` answers ok; return the base URL.

    For a launched server (``server``: its name) the URL comes from its ready file; its exit
    first is a failure: the :class:`~rollgym.errors.ConfigError` its start check left
    (:mod:`rollgym.servers.start_checks`), else a :class:`LaunchError` from ``failure``.
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
            problem = None if ready_file is None else read_problem(ready_file, server)
            if problem is not None:  # its start check's one line, not its log's tail
                raise problem
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


async def _health_problem(session: HealthSession, url: str, strict: bool = True) -> str:
    """'' when healthy, else why not (starting with ``connection refused`` when it was)."""
    try:
        status, raw = await session.get(f"{url}/health")
        if not strict:
            return "" if status < 500 else f"GET /health answered HTTP {status}"
        if status != 200:
            return f"GET /health answered HTTP {status}"
        body = orjson.loads(raw)
    except ConnectionRefusedError as exc:
        return f"{_REFUSED}: GET {url}/health: {exc}"
    except TimeoutError:
        return f"GET {url}/health: no answer within {_LOOK_TIMEOUT_S:.0f} s"
    except OSError as exc:  # the failure below HTTP, already in words
        return f"GET {url}/health: {exc}".rstrip(": ")
    except ValueError as exc:
        return f"GET {url}/health: {type(exc).__name__}: {exc}"
    if not isinstance(body, dict) or body.get("status") != "ok":
        return f"GET /health answered {body!r}"
    return ""
