"""Waiting on a condition, with a generous bound, instead of sleeping a guessed time.

A test that needs something to have happened (a server up, a file written, a process gone, a
call in flight) polls for exactly that: on a loaded machine it waits longer, on an idle one it
goes on at once, and a fixed sleep can neither be too short nor pass vacuously. Importable
from every test folder (pytest puts ``tests/`` on ``sys.path`` for its conftest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sized
from typing import TypeVar

#: Generous: a machine under ``stress-ng --cpu 2`` can take seconds for what takes milliseconds.
DEFAULT_TIMEOUT_S = 60.0

Seen = TypeVar("Seen", bound=Sized)


def wait_for(
    predicate: Callable[[], object], timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.05
) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_until(
    predicate: Callable[[], object], what: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> None:
    """Block until ``predicate`` holds; fails the test naming ``what`` if it never does."""
    assert wait_for(predicate, timeout_s), f"timed out after {timeout_s:g} s waiting for {what}"


async def until(
    predicate: Callable[[], object],
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.005,
) -> None:
    """:func:`wait_until` for a test's event loop: polls without blocking the loop, so the
    servers and calls that loop runs go on meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(interval)


def settled(
    read: Callable[[], Seen],
    quiet_s: float = 2.0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ready: Callable[[Seen], bool] = lambda seen: True,
    interval: float = 0.2,
) -> Seen:
    """What ``read`` answers once ``ready`` holds and its size has not changed for ``quiet_s``
    (or at ``timeout_s``): for what arrives in batches with no end marker (spans exported by
    another process, a backend that ingests asynchronously). On a loaded machine a batch that
    comes late starts the quiet time again, where a fixed sleep would have missed it."""
    deadline = time.monotonic() + timeout_s
    seen = read()
    size, since = len(seen), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(interval)
        seen = read()
        now = time.monotonic()
        if len(seen) != size or not ready(seen):
            size, since = len(seen), now
        elif now - since >= quiet_s:
            break
    return seen
