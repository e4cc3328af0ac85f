"""``sessions.jsonl``: a session's start line dates from when the session was made, so spans its
servers open while starting up fall inside it (``traces check`` judges a killed session's spans
by that window)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from rollgym.driver.sessions import SESSIONS, SessionLog, read_sessions


def test_the_start_line_is_dated_when_the_session_was_made(tmp_path: Path) -> None:
    log = SessionLog(tmp_path)
    made_by = time.time()  # the servers' start-up spans begin after this, before begin()
    (tmp_path / "rollouts.jsonl").write_bytes(b'{"rollout_id": "0-0"}\n')
    log.begin("ab" * 16)
    log.end()
    start, end = (orjson.loads(line) for line in (tmp_path / SESSIONS).read_bytes().splitlines())
    assert start["event"] == "start" and start["at"] <= made_by <= end["at"]
    assert start["offsets"]["rollouts.jsonl"] == len(b'{"rollout_id": "0-0"}\n')
    (session,) = read_sessions(tmp_path)
    assert session["ended"] and session["job_trace_id"] == "ab" * 16


def test_each_session_has_its_index_and_says_how_it_ended(tmp_path: Path) -> None:
    """The index qualifies every dispatch of the session (``gym.run.session``); no end line
    means the session was killed."""
    first = SessionLog(tmp_path)
    first.begin(None)
    first.end("interrupted")
    killed = SessionLog(tmp_path)
    killed.begin(None)  # kill -9: no end line
    last = SessionLog(tmp_path)
    last.begin(None)
    last.end("completed")
    assert (first.index, killed.index, last.index) == (0, 1, 2)
    sessions = read_sessions(tmp_path)
    assert [(s["index"], s["status"], s["ended"]) for s in sessions] == [
        (0, "interrupted", True),
        (1, "killed", False),
        (2, "completed", True),
    ]
