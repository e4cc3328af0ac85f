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

import orjson

# The file's format lives on the ground floor (``traces check`` reads it too); its names stay
# importable from here.
from rollgym.session_records import OUTPUT_FILES, SESSIONS, killed_ranges, read_sessions

__all__ = ["OUTPUT_FILES", "SESSIONS", "SessionLog", "killed_ranges", "read_sessions"]


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

    def end(self, status: str | None = None, spans_lost: Mapping[str, int] | None = None) -> None:
        """Call when the session ends in any way but a kill (normal, error, Ctrl-C);
        ``status`` is the run's (``completed``, ``interrupted``, ...). ``spans_lost``: the
        spans this session's processes counted dropped or unknown (``spans_dropped``,
        ``spans_unknown``), kept per session so ``traces check`` can tell a counted loss from
        a broken trace after a resume (summary.json holds the last session's only)."""
        if self.started:
            record: dict[str, object] = {"session": self.session, "event": "end", "at": time.time()}
            if status is not None:
                record["status"] = status
            if spans_lost:
                record["spans_lost"] = dict(spans_lost)
            self._append(record)

    def _append(self, record: Mapping[str, object]) -> None:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        with (
            contextlib.suppress(OSError),
            open(self.output_dir / SESSIONS, "ab", buffering=0) as out,
        ):
            out.write(line)
