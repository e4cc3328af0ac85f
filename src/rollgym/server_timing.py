"""Seconds a server spent on one request's behalf, carried upstream in ``Server-Timing``.

Why a header: the code that builds a rollout's ``usage`` sees only answer bodies, while the
seconds it wants are measured elsewhere: the model server knows its engine's time, the
environment server its sandbox's. Each answers with the standard W3C ``Server-Timing``
header (``engine;dur=812.4``, milliseconds), which leaves the OpenAI-shaped body untouched
and which any client may ignore. Why a context variable on both ends: the request's route
opens a :func:`collecting` scope; whatever runs inside it (an engine, a sandbox exec, or
the process's HTTP client reading another server's ``Server-Timing``) adds to it with
:func:`note`, so a rollout's seconds reach its usage however deep they were measured,
and nothing is noted when no scope is open (the driver, a test calling a tool directly).

Telemetry plays no part: these seconds are kept with tracing on or off.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Final

#: The response header (its standard name; HTTP header names are case-insensitive).
HEADER: Final = "Server-Timing"
#: Seconds a model engine spent on a request (queue, prefill, decode).
ENGINE: Final = "engine"
#: Seconds a request waited on sandbox execs.
SANDBOX: Final = "sandbox"

#: ``name;dur=123.4`` (other parameters such as ``desc`` are allowed and skipped).
_METRIC = re.compile(r"^\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:;(.*))?$")
_DUR = re.compile(r"(?:^|;)\s*dur\s*=\s*\"?([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\"?\s*(?:;|$)")


class Timings:
    """Seconds by name for one request; mutable, so tasks and threads the request starts
    (they copy the context, not the object) add to the same totals. Adding holds a lock:
    a blocking SDK client's worker threads add at once, and a read-then-write under the GIL
    alone can lose one of two additions."""

    __slots__ = ("_lock", "seconds")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        if seconds >= 0:
            with self._lock:
                self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def get(self, name: str) -> float | None:
        return self.seconds.get(name)

    def header(self) -> dict[str, str]:
        """The response headers that report these seconds (none when nothing was noted)."""
        value = format_header(self.seconds)
        return {HEADER: value} if value else {}


_current: ContextVar[Timings | None] = ContextVar("rollgym_server_timing", default=None)


class collecting:  # noqa: N801 - used like a function: ``with collecting() as timings:``
    """A scope (one request's, or one rollout's) that :func:`note` adds to, into ``timings``
    (a new one by default); scopes nest, the inner one wins.

    A class, not a generator: every request of every server opens one, and a generator-based
    context manager costs a generator and its frames each time."""

    __slots__ = ("_timings", "_token")

    def __init__(self, timings: Timings | None = None) -> None:
        self._timings = Timings() if timings is None else timings
        self._token: Token[Timings | None] | None = None

    def __enter__(self) -> Timings:
        self._token = _current.set(self._timings)
        return self._timings

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


def current() -> Timings | None:
    """The open scope's timings, or None outside any."""
    return _current.get()


def note(name: str, seconds: float) -> None:
    """Add ``seconds`` under ``name`` to the open scope (nothing happens outside one)."""
    timings = _current.get()
    if timings is not None:
        timings.add(name, seconds)


def note_header(value: str | None) -> None:
    """Add what another server's ``Server-Timing`` header says to the open scope."""
    if value is None:
        return
    timings = _current.get()
    if timings is None:
        return
    for name, seconds in parse_header(value).items():
        timings.add(name, seconds)


def format_header(seconds: Mapping[str, float]) -> str:
    """``engine;dur=812.4, sandbox;dur=31.05`` (milliseconds, as the standard has it)."""
    return ", ".join(f"{name};dur={value * 1000:.3f}" for name, value in seconds.items())


def parse_header(value: str) -> dict[str, float]:
    """Seconds by name from a ``Server-Timing`` value; a metric without a valid ``dur`` is
    skipped (the header is advisory: a malformed one never fails a request), repeated names
    are summed."""
    seconds: dict[str, float] = {}
    for part in value.split(","):
        metric = _METRIC.match(part)
        if metric is None or metric.group(2) is None:
            continue
        dur = _DUR.search(metric.group(2))
        if dur is None:
            continue
        name = metric.group(1)
        seconds[name] = seconds.get(name, 0.0) + float(dur.group(1)) / 1000
    return seconds
