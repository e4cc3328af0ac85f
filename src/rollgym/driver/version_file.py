"""``run.policy_version_file``: the trainer's current policy version, for ``rollgym run``.

The trainer rewrites the file (atomically: write a temporary file, then rename it over) after
each step; the run reads it before the first rollout and again whenever its modification
time or size changes (polled: a few stat calls a second cost nothing beside the rollouts),
and sets ``Collector.policy_version`` from it. A file that does not exist yet means "no
version yet"; one that holds nothing usable is reported once per change and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from rollgym.errors import ServerCallError, TransportError
from rollgym.policy_versions import PolicyVersion, parse_version

log = logging.getLogger(__name__)
POLL_S = 0.2


class VersionTarget(Protocol):
    """What the file's version is handed to (the Collector)."""

    async def set_policy_version(self, version: PolicyVersion) -> None: ...


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def read_version(path: Path) -> PolicyVersion | None:
    """The version in the file; None when it is missing, empty or unreadable (logged)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("run.policy_version_file %s: cannot read it (%s); version unchanged", path, exc)
        return None
    if not text or "\n" in text:
        log.warning(
            "run.policy_version_file %s: expected one line with an int or a label, got %r; "
            "version unchanged",
            path,
            text[:80],
        )
        return None
    return parse_version(text)


async def _apply(target: VersionTarget, path: Path, last: list[PolicyVersion | None]) -> None:
    version = read_version(path)
    if version is None or version == last[0]:
        return
    try:
        await target.set_policy_version(version)
    except (ServerCallError, TransportError) as exc:
        log.warning("policy version %r from %s not delivered: %s", version, path, exc)
    last[0] = version


async def _follow(
    target: VersionTarget,
    path: Path,
    seen: tuple[int, int] | None,
    last: list[PolicyVersion | None],
) -> None:
    while True:
        await asyncio.sleep(POLL_S)
        stamp = _stamp(path)
        if stamp is not None and stamp != seen:
            seen = stamp
            await _apply(target, path, last)


@contextlib.asynccontextmanager
async def follow_version_file(target: VersionTarget, path: Path | None) -> AsyncIterator[None]:
    """While inside, keep ``target``'s version equal to the file's (nothing without a path)."""
    if path is None:
        yield
        return
    last: list[PolicyVersion | None] = [None]
    seen = _stamp(path)
    await _apply(target, path, last)
    task = asyncio.get_running_loop().create_task(_follow(target, path, seen, last))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
