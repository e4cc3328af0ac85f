"""One rollout's records in a run directory: its rollout line, its trajectory, its failure.

``traces show --conversation`` needs what a run *wrote* (the trajectory holds the messages; the
trace store holds none), found by the id a person types: ``3-0`` names the rollout, whatever
attempt finished it (``3-0-a2``); ``3-0-a2`` names that attempt only. The files are read, never
repaired (a torn last line is skipped), so a run that is still going can be looked into.
:func:`committed_trajectories` reads every trajectory a rollout line commits (``export``,
``traces check --data``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from rollgym.driver.output import FAILURES, ROLLOUTS, TRAJECTORIES
from rollgym.json_types import JsonObject

_ATTEMPT_SUFFIX = re.compile(r"-a\d+$")


@dataclass
class RolloutFiles:
    """What the run directory holds of one rollout (each None when it holds nothing)."""

    rollout: JsonObject | None = None
    trajectory: JsonObject | None = None
    failure: JsonObject | None = None


def read_lines(path: Path) -> Iterator[JsonObject]:
    """The whole JSON-object lines of a JSONL file, read only (a torn last line is skipped)."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                return
            record = json_object_line(raw)
            if record is not None:
                yield record


def json_object_line(raw: bytes) -> JsonObject | None:
    """One JSONL line as a JSON object; None for a line that is not one (a reader that
    tolerates a partly written or foreign line skips it)."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


class UnreadableLine(ValueError):
    """A committed line of a run's file that is not a JSON object: ``file:line`` and why."""


def _committed_end(run_dir: Path) -> int:
    """Byte offset of the end of the last trajectory line a rollout line points at."""
    end = 0
    path = run_dir / ROLLOUTS
    if not path.exists():
        return 0
    with open(path, "rb") as handle:
        for raw in handle:
            if b'"trajectory"' not in raw:
                continue
            try:
                pointer = orjson.loads(raw).get("trajectory")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(pointer, dict):
                offset, size = pointer.get("offset", 0), pointer.get("bytes", 0)
                if isinstance(offset, int) and isinstance(size, int):
                    end = max(end, offset + size)
    return end


def committed_trajectories(run_dir: Path) -> Iterator[JsonObject]:
    """Every line of ``trajectories.jsonl`` that a rollout line commits (those before the end
    of the last one a rollout line points at: a ``kill -9`` can leave one unfinished line
    after it, which a resume cuts off). A committed line that is not a JSON object raises
    :class:`UnreadableLine` naming it."""
    path = run_dir / TRAJECTORIES
    end = _committed_end(run_dir)
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            offset += len(raw)
            if offset > end:
                break
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise UnreadableLine(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(record, dict):
                raise UnreadableLine(f"{path}:{number}: not a JSON object")
            yield record


def recorded_run_id(run_dir: Path) -> str | None:
    """The run id the run directory records (``run.json``, else ``summary.json``)."""
    for name in ("run.json", "summary.json"):
        try:
            record = orjson.loads((run_dir / name).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(record, dict) and isinstance(record.get("run_id"), str):
            return str(record["run_id"])
    return None


def names_rollout(wanted: str, rollout_id: object) -> bool:
    """Does ``wanted`` (as typed) name the rollout whose final attempt is ``rollout_id``?"""
    if not isinstance(rollout_id, str):
        return False
    if rollout_id == wanted:
        return True
    return _ATTEMPT_SUFFIX.search(wanted) is None and _ATTEMPT_SUFFIX.sub("", rollout_id) == wanted


def _trajectory_at(run_dir: Path, pointer: object) -> JsonObject | None:
    if not isinstance(pointer, dict):
        return None
    offset, size = pointer.get("offset"), pointer.get("bytes")
    if not isinstance(offset, int) or not isinstance(size, int) or offset < 0 or size <= 0:
        return None
    try:
        with open(run_dir / str(pointer.get("file") or TRAJECTORIES), "rb") as handle:
            handle.seek(offset)
            line = orjson.loads(handle.read(size))
    except (OSError, orjson.JSONDecodeError):
        return None
    trajectory = line.get("trajectory") if isinstance(line, dict) else None
    return trajectory if isinstance(trajectory, dict) else None


def read_rollout(run_dir: Path, rollout_id: str) -> RolloutFiles:
    """The last record of ``rollout_id`` in each output file of ``run_dir``."""
    found = RolloutFiles()
    for record in read_lines(run_dir / ROLLOUTS):
        if names_rollout(rollout_id, record.get("rollout_id")):
            found.rollout = record
    if found.rollout is not None:
        found.trajectory = _trajectory_at(run_dir, found.rollout.get("trajectory"))
    for record in read_lines(run_dir / FAILURES):
        if names_rollout(rollout_id, record.get("rollout_id")):
            found.failure = record
    return found
