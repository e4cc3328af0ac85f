"""The format of ``sessions.jsonl`` (one line when a session of a run starts, one when it
ends): its name, the files whose offsets it records, and how it is read back.

On the ground floor because two rooms use it: the driver writes it
(:class:`rollgym.driver.sessions.SessionLog`) and ``rollgym traces check``
(:mod:`rollgym.reading.check`) reads it, like ``incarnations.py`` next to it. What the
lines mean (killed sessions, the session index) is told in :mod:`rollgym.driver.sessions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

SESSIONS = "sessions.jsonl"
OUTPUT_FILES = ("rollouts.jsonl", "failures.jsonl")


def read_sessions(run_dir: Path) -> list[dict[str, object]]:
    """The sessions in start order, each with ``ended`` (False: it was killed), ``index``
    (its position; older files have none written), ``status`` (how it ended: the run's
    status, ``killed`` when it has no end line, ``ended`` when the end line says none) and
    ``spans_lost`` (the spans its processes counted dropped or unknown, by kind)."""
    starts: list[dict[str, object]] = []
    ended: dict[str, str] = {}
    lost: dict[str, object] = {}
    try:
        data = (run_dir / SESSIONS).read_bytes()
    except OSError:
        return []
    for raw in data.splitlines():
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a torn last line: that session was killed while starting
        if not isinstance(record, dict):
            continue
        if record.get("event") == "start":
            starts.append(record)
        elif record.get("event") == "end":
            ended[str(record.get("session"))] = str(record.get("status") or "ended")
            if isinstance(record.get("spans_lost"), dict):
                lost[str(record.get("session"))] = record["spans_lost"]
    return [
        {
            **start,
            "index": index,
            "ended": str(start.get("session")) in ended,
            "status": ended.get(str(start.get("session")), "killed"),
            "spans_lost": lost.get(str(start.get("session")), {}),
        }
        for index, start in enumerate(starts)
    ]


def killed_ranges(
    sessions: Sequence[Mapping[str, object]], file_name: str
) -> list[tuple[int, int]]:
    """Byte ranges of ``file_name`` written by sessions that were killed (end: next start)."""
    ranges = []
    for index, session in enumerate(sessions):
        if session["ended"]:
            continue
        start = _offset(session, file_name)
        later = sessions[index + 1 :]
        end = _offset(later[0], file_name) if later else 1 << 62
        ranges.append((start, end))
    return ranges


def _offset(session: Mapping[str, object], file_name: str) -> int:
    """Where ``file_name`` stood when ``session`` started (0: not recorded)."""
    offsets = session.get("offsets")
    value = offsets.get(file_name, 0) if isinstance(offsets, dict) else 0
    return int(value)
