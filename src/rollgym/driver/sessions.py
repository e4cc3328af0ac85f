"""``sessions.jsonl``: one line when a session of a run starts, one when it ends.

A run resumed after ``kill -9`` has a session that never ended: the spans still queued in its
processes were never exported, so rows it wrote may name traces that no store has. Nothing
else can tell those rows from a broken trace contract, so each session records where its rows
begin in the output files (byte offsets) and its job trace; ``rollgym traces check`` reports
rows of a killed session whose traces are gone as their own category, not as violations.

Each session has an index (0 for the first, then 1, 2, ...): it qualifies the identity of
every dispatch the session makes (``gym.run.session`` on the dispatch span, ``session`` in
the output lines), because a rollout cancelled by Ctrl-C or lost with a killed driver runs
again under the same rollout id and attempt in the next session. The end line says how the
session ended (``completed``, ``interrupted``, ``error``...); a session with no end line was
killed.

Best effort: a line that cannot be written (a full disk) only makes the check stricter.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

SESSIONS = "sessions.jsonl"
OUTPUT_FILES = ("rollouts.jsonl", "failures.jsonl")


class SessionLog:
    """Appends this session's start and end lines to ``<output_dir>/sessions.jsonl``."""

    def __init__(self, output_dir: Path) -> None:
        """Make it when the session begins, before its servers start: the start line's ``at``
        is this moment, so every span of the session (the servers' start-up spans included)
        starts after it and ``traces check`` places it in the right session."""
        self.output_dir = output_dir
        self.session = uuid.uuid4().hex[:12]
        #: This session's place in the run's history (0: the first session).
        self.index = len(read_sessions(output_dir))
        self.started = False
        self.created_at = time.time()

    def begin(self, job_trace_id: str | None) -> None:
        """Call before the first record of this session is written (the offsets are taken
        now; ``at`` is when the session was made)."""
        offsets = {}
        for name in OUTPUT_FILES:
            try:
                offsets[name] = (self.output_dir / name).stat().st_size
            except OSError:
                offsets[name] = 0
        self._append(
            {
                "session": self.session,
                "index": self.index,
                "event": "start",
                "at": self.created_at,
                "job_trace_id": job_trace_id,
                "offsets": offsets,
            }
        )
        self.started = True

    def end(self, status: str | None = None) -> None:
        """Call when the session ends in any way but a kill (normal, error, Ctrl-C);
        ``status`` is the run's (``completed``, ``interrupted``, ...)."""
        if self.started:
            record: dict[str, object] = {"session": self.session, "event": "end", "at": time.time()}
            if status is not None:
                record["status"] = status
            self._append(record)

    def _append(self, record: Mapping[str, object]) -> None:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        with (
            contextlib.suppress(OSError),
            open(self.output_dir / SESSIONS, "ab", buffering=0) as out,
        ):
            out.write(line)


def read_sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The sessions in start order, each with ``ended`` (False: it was killed), ``index``
    (its position; older files have none written) and ``status`` (how it ended: the run's
    status, ``killed`` when it has no end line, ``ended`` when the end line says none)."""
    starts: list[dict[str, object]] = []
    ended: dict[str, str] = {}
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
    return [
        {
            **start,
            "index": index,
            "ended": str(start.get("session")) in ended,
            "status": ended.get(str(start.get("session")), "killed"),
        }
        for index, start in enumerate(starts)
    ]


def killed_ranges(sessions: list[dict[str, Any]], file_name: str) -> list[tuple[int, int]]:
    """Byte ranges of ``file_name`` written by sessions that were killed (end: next start)."""
    ranges = []
    for index, session in enumerate(sessions):
        if session["ended"]:
            continue
        start = int(session.get("offsets", {}).get(file_name, 0))
        later = sessions[index + 1 :]
        end = int(later[0].get("offsets", {}).get(file_name, 0)) if later else 1 << 62
        ranges.append((start, end))
    return ranges
