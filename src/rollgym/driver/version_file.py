"""``run.policy_version_file``: the trainer's current policy version, for ``rollgym run``.

The trainer rewrites the file (atomically: write a temporary file, then rename it over) after
each step; the run reads it before the first rollout and again whenever its modification
time or size changes (polled: a few stat calls a second cost nothing beside the rollouts),
and sets ``Collector.policy_version`` from it. A file that does not exist yet means "no
version yet"; one that holds nothing usable is reported once per change and ignored.

The file holds one line with the version (``3``, ``step-3``), or a JSON object that also
names the checkpoint to load and, if the trainer wants the engine checked, the probe::

    {"version": 3, "weights": "ckpt/step-3",
     "probe": {"token_ids": [1, 2, 3], "logprobs": [-2.1, -0.4], "bound": 0.05}}

A relative ``weights`` path is read from the file's folder. A checkpoint that cannot be loaded
is a warning; the run goes on under the weights the model servers still serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rollgym.driver.weight_probe import DEFAULT_BOUND, Probe
from rollgym.errors import ServerCallError, TransportError
from rollgym.policy_versions import PolicyVersion, is_version, parse_version

log = logging.getLogger(__name__)
POLL_S = 0.2


class VersionTarget(Protocol):
    """What the file's version is handed to (the Collector)."""

    async def set_policy_version(
        self,
        version: PolicyVersion,
        *,
        weights: str | os.PathLike[str] | None = None,
        probe: Probe | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class VersionSet:
    """What the file says: the version, and the checkpoint and probe that come with it."""

    version: PolicyVersion
    weights: str | None = None
    probe: Probe | None = None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def read_version(path: Path) -> VersionSet | None:
    """What the file says; None when it is missing, empty or unreadable (logged)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("run.policy_version_file %s: cannot read it (%s); version unchanged", path, exc)
        return None
    if text.startswith("{"):
        try:
            return _json_version(path, json.loads(text))
        except ValueError as exc:
            log.warning("run.policy_version_file %s: %s; version unchanged", path, exc)
            return None
    if not text or "\n" in text:
        log.warning(
            "run.policy_version_file %s: expected one line with an int or a label, got %r; "
            "version unchanged",
            path,
            text[:80],
        )
        return None
    return VersionSet(parse_version(text))


def _json_version(path: Path, data: object) -> VersionSet:
    """The file's JSON object read; ValueError naming the key that is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    version = data.get("version")
    if not is_version(version):
        raise ValueError(f"'version' must be an int or a non-empty string, got {version!r}")
    unknown = sorted(set(data) - {"version", "weights", "probe"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (expected version, weights, probe)")
    weights = data.get("weights")
    if weights is not None and (not isinstance(weights, str) or not weights):
        raise ValueError(f"'weights' must be a non-empty path, got {weights!r}")
    return VersionSet(
        version,
        None if weights is None else str(path.parent / weights),
        _probe(data.get("probe")),
    )


def _probe(data: object) -> Probe | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("'probe' must be an object {token_ids, logprobs, bound}")
    bound = data.get("bound", DEFAULT_BOUND)
    if not isinstance(bound, (int, float)) or isinstance(bound, bool):
        raise ValueError(f"'probe.bound' must be a number, got {bound!r}")
    token_ids, logprobs = data.get("token_ids"), data.get("logprobs")
    if not isinstance(token_ids, list) or not isinstance(logprobs, list):
        raise ValueError("'probe' needs 'token_ids' and 'logprobs' (lists)")
    try:
        return Probe(token_ids, logprobs, float(bound))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"'probe': {exc}") from None


async def _apply(target: VersionTarget, path: Path, last: list[VersionSet | None]) -> None:
    told = read_version(path)
    if told is None or told == last[0]:
        return
    try:
        if told.weights is None and told.probe is None:
            await target.set_policy_version(told.version)
        else:
            await target.set_policy_version(told.version, weights=told.weights, probe=told.probe)
    except (ServerCallError, TransportError) as exc:
        log.warning("policy version %r from %s not delivered: %s", told.version, path, exc)
    last[0] = told


async def _follow(
    target: VersionTarget,
    path: Path,
    seen: tuple[int, int] | None,
    last: list[VersionSet | None],
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
    last: list[VersionSet | None] = [None]
    seen = _stamp(path)
    await _apply(target, path, last)
    task = asyncio.get_running_loop().create_task(_follow(target, path, seen, last))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
